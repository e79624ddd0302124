"""End-to-end losslessness of the speculative loop.

Greedy: a tiny random fp32 transformer (real attention with the tree mask, KV
cache committed through the commit maps) decodes exactly as plain greedy
decoding, for many seeds, budgets and block sizes.
Sampling: the joint law of the first tokens generated with DDTree
sample-and-walk matches the exact target law (TV < 0.02, 100k draws), like
plain sampling through the same harness, while a lossy acceptance rule fails.
"""

import itertools

import pytest
import torch

from tests.ddtree.toymodel import ToyLM


def spec_decode_greedy(dd, model, prompts, n_new, L, B, p_ok, g, check_commit=True):
    R, V = len(prompts), model.V
    refs = [model.greedy(p, n_new + 2 * L + 2) for p in prompts]  # drafter's oracle only
    empty = (torch.zeros(0, model.H, model.Dh), torch.zeros(0, model.H, model.Dh))
    caches = []
    for p in prompts:
        if len(p) > 1:
            caches.append(model.causal(torch.tensor(p[:-1]))[2])
        else:
            caches.append([empty for _ in model.layers])
    seqs = [list(p) for p in prompts]
    outs = [[] for _ in prompts]
    N = B + 1
    steps = 0
    while min(len(o) for o in outs) < n_new:
        steps += 1
        logits = torch.randn(R, L, V, generator=g)
        for r in range(R):  # noisy copy of the target's continuation
            for j in range(L):
                k = len(outs[r]) + j
                tokj = refs[r][k] if torch.rand((), generator=g) < p_ok else int(torch.randint(0, V, (1,), generator=g))
                logits[r, j, tokj] += 4.0
        ids, lp = dd.topk_logprobs(logits, min(B, V))
        t = dd.build_ddtree(ids, lp, B)
        pl = torch.tensor([len(s) - 1 for s in seqs])
        roots = torch.tensor([s[-1] for s in seqs])
        vi = dd.build_verify_inputs(t, roots, pl, prefix_lens_sum=int(pl.sum()))
        dt, pos = vi.draft_token.view(R, N), vi.positions.view(R, N)
        off, preds, kvs, hids = 0, [], [], []
        for r in range(R):
            p = int(pl[r])
            blk = vi.custom_mask[off : off + N * (p + N)].view(N, p + N)
            off += N * (p + N)
            lg, hid, kv = model.forward(dt[r], pos[r], blk, caches[r])
            preds.append(lg.argmax(-1))
            kvs.append(kv)
            hids.append(hid)
        acc = dd.accept_greedy(t, torch.stack(preds))
        cm = dd.commit_maps(t, acc)
        hid_flat = torch.cat(hids)  # [R*N, D]
        for r in range(R):
            m = int(cm.num_committed[r])
            keep = cm.kv_keep_slots[r, :m] - r * N
            caches[r] = [(torch.cat([c[0], kv[0][keep]]), torch.cat([c[1], kv[1][keep]]))
                         for c, kv in zip(caches[r], kvs[r])]
            toks = cm.committed_tokens[r, :m].tolist()
            if check_commit:
                # hidden rows gathered for the next draft round = plain prefill rows
                full = model.causal(torch.tensor(seqs[r] + toks[:-1]))
                got = hid_flat[cm.hidden_gather_index[r, :m]]
                assert torch.allclose(got, full[1][len(seqs[r]) - 1 :], atol=1e-4), "hidden gather"
                for li, (k, v) in enumerate(caches[r]):
                    assert torch.allclose(k, full[2][li][0], atol=1e-4), "kv commit"
                    assert torch.allclose(v, full[2][li][1], atol=1e-4), "kv commit"
            seqs[r].extend(toks)
            outs[r].extend(toks)
    return [o[:n_new] for o in outs], steps


CONFIGS = [  # (seed, L = block_size - 1, budget, p_ok)
    (0, 1, 1, 0.9), (1, 3, 2, 0.8), (2, 3, 8, 0.6), (3, 7, 4, 0.9), (4, 7, 16, 0.7),
    (5, 15, 15, 0.9), (6, 15, 48, 0.6), (7, 5, 30, 0.3), (8, 2, 64, 0.5), (9, 15, 100, 0.8),
    (10, 4, 5, 0.0), (11, 9, 24, 0.95),
]


@pytest.mark.parametrize("seed,L,B,p_ok", CONFIGS)
def test_greedy_lossless_toy_transformer(dd, seed, L, B, p_ok):
    g = torch.Generator().manual_seed(1000 + seed)
    V = 24
    model = ToyLM(V, dim=32, layers=2, heads=2, seed=seed)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (1, 4, 9)]
    n_new = 20
    out, steps = spec_decode_greedy(dd, model, prompts, n_new, L, B, p_ok, g, check_commit=seed % 3 == 0)
    for p, o in zip(prompts, out):
        assert o == model.greedy(p, n_new)
    if p_ok >= 0.8 and L >= 3:
        assert steps < n_new  # the drafts were actually accepted (multi-token steps)


# ---------------------------------------------------------------- sampling

def _table(V, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(V + 1, V + 1, V, generator=g) * 1.5, -1)  # p(x | prev2, prev1)


def exact_joint(table, V, T):
    BOS = V
    P = torch.zeros(V ** T, dtype=torch.float64)
    for i, xs in enumerate(itertools.product(range(V), repeat=T)):
        a, b, pr = BOS, BOS, 1.0
        for x in xs:
            pr *= float(table[a, b, x])
            a, b = b, x
        P[i] = pr
    return P


def sample_harness(dd, table, V, T, R, L, B, mode, seed):
    """Generate the first T tokens for R independent requests (context BOS BOS)."""
    g = torch.Generator().manual_seed(seed)
    BOS = V
    root = torch.full((R,), BOS)
    prev = torch.full((R,), BOS)
    out = torch.full((R, T + 1), -1)  # last column: dump
    cnt = torch.zeros(R, dtype=torch.long)
    first_step = None
    for _ in range(T):
        if mode == "plain":
            probs = table[prev, root].unsqueeze(1)
            x = dd.sample_per_node(probs, g)[:, 0]
            toks, m = x.unsqueeze(1), torch.ones(R, dtype=torch.long)
        else:
            logits = torch.randn(R, L, V, generator=g) * 2
            ids, lp = dd.topk_logprobs(logits, min(B, V))
            t = dd.build_ddtree(ids, lp, B)
            tok = t.tokens.clone()
            tok[:, 0] = root
            ptok = torch.where(t.parents >= 0, torch.gather(tok, 1, t.parents.clamp(min=0)), prev.unsqueeze(1))
            probs = table[ptok, tok]  # [R, N, V]: the target at every node given its path
            if mode == "tree":
                acc = dd.accept_sampling(t, probs, g)
            else:  # lossy control: also take any child the target gives >= 0.5
                pred = dd.sample_per_node(probs, g)
                N = tok.shape[1]
                for i in range(1, N):
                    par = t.parents[:, i]
                    ok = (par >= 0) & (probs[torch.arange(R), par.clamp(min=0), tok[:, i]] >= 0.5)
                    pred[torch.arange(R)[ok], par[ok]] = tok[ok, i]
                acc = dd.accept_greedy(t, pred)
            cm = dd.commit_maps(t, acc)
            toks, m = cm.committed_tokens, cm.num_committed
        j = torch.arange(toks.shape[1]).expand(R, -1)
        write = (j < m.unsqueeze(1)) & (cnt.unsqueeze(1) + j < T)
        dst = torch.where(write, cnt.unsqueeze(1) + j, T)
        out.scatter_(1, dst, torch.where(write, toks, -1))
        last = torch.gather(toks, 1, (m - 1).unsqueeze(1)).squeeze(1)
        second = torch.where(m >= 2, torch.gather(toks, 1, (m - 2).clamp(min=0).unsqueeze(1)).squeeze(1), root)
        prev, root = second, last
        cnt = cnt + m
        if first_step is None:
            first_step = float(m.double().mean())
    assert (cnt >= T).all()
    first = out[:, :T]
    code = torch.zeros(R, dtype=torch.long)
    for i in range(T):
        code = code * V + first[:, i]
    return torch.bincount(code, minlength=V ** T).double() / R, first_step


@pytest.mark.parametrize("L,B", [(3, 6), (2, 3)])
def test_sampling_preserves_target_distribution(dd, L, B):
    V, T, R = 4, 3, 100_000
    table = _table(V, 7)
    P = exact_joint(table, V, T)
    emp, tau = sample_harness(dd, table, V, T, R, L, B, "tree", 1)
    tv_tree = 0.5 * (emp - P).abs().sum()
    assert tau > 1.2  # the trees were actually accepted into (multi-token steps)
    emp, _ = sample_harness(dd, table, V, T, R, L, B, "plain", 2)
    tv_plain = 0.5 * (emp - P).abs().sum()
    emp, _ = sample_harness(dd, table, V, T, R, L, B, "lossy", 3)
    tv_lossy = 0.5 * (emp - P).abs().sum()
    assert tv_plain < 0.02, float(tv_plain)
    assert tv_tree < 0.02, float(tv_tree)
    assert abs(float(tv_tree) - float(tv_plain)) < 0.01
    assert tv_lossy > 0.05, float(tv_lossy)  # the harness detects a lossy rule
