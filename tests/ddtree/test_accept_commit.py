"""Acceptance walk, commit maps and a toy recurrent (SSM-like) state committed
from the last accepted node."""

import torch

from .helpers import random_logprobs, walk_oracle


def trees_and_preds(dd, seed, R=8, L=5, V=4, B=20, hit=0.7):
    g = torch.Generator().manual_seed(seed)
    ids, lp = random_logprobs(g, R, L, V, min(B, V))
    t = dd.build_ddtree(ids, lp, B)
    N = B + 1
    # predictions: often a child's token (deep walks), sometimes random
    pred = torch.randint(0, V, (R, N), generator=g)
    for r in range(R):
        for i in range(N):
            kids = [j for j in range(N) if int(t.parents[r, j]) == i]
            if kids and torch.rand((), generator=g) < hit:
                j = kids[int(torch.randint(0, len(kids), (1,), generator=g))]
                pred[r, i] = t.tokens[r, j]
    return t, pred


def test_accept_greedy_matches_oracle(dd):
    for seed in range(6):
        t, pred = trees_and_preds(dd, seed, B=[1, 5, 20, 60, 7, 33][seed])
        acc = dd.accept_greedy(t, pred)
        R, N = t.tokens.shape
        assert acc.accept_index.shape == (R, t.max_depth + 1)
        for r in range(R):
            path, bonus = walk_oracle(t, r, pred[r].tolist())
            m = len(path)
            assert acc.accept_index[r, :m].tolist() == path
            assert (acc.accept_index[r, m:] == -1).all()
            assert int(acc.accept_len[r]) == m - 1
            assert int(acc.last_node[r]) == path[-1]
            assert int(acc.bonus[r]) == bonus


def test_commit_maps(dd):
    t, pred = trees_and_preds(dd, 3, R=6, B=25)
    acc = dd.accept_greedy(t, pred)
    cm = dd.commit_maps(t, acc)
    R, N = t.tokens.shape
    for r in range(R):
        path, bonus = walk_oracle(t, r, pred[r].tolist())
        m = len(path)
        slots = [r * N + p for p in path]
        assert cm.kv_keep_slots[r, :m].tolist() == slots
        assert (cm.kv_keep_slots[r, m:] == -1).all()
        assert cm.hidden_gather_index[r, :m].tolist() == slots
        assert sorted(torch.nonzero(cm.kv_keep_mask[r]).flatten().tolist()) == sorted(path)
        assert torch.equal(cm.kv_evict_mask[r], ~cm.kv_keep_mask[r])
        assert int(cm.kv_evict_mask[r].sum()) == N - m
        assert int(cm.mamba_state_index[r]) == path[-1]
        assert cm.mamba_track_index[r, :m].tolist() == path
        assert int(cm.num_committed[r]) == m
        want = [int(t.tokens[r, p]) for p in path[1:]] + [bonus]
        assert cm.committed_tokens[r, :m].tolist() == want
        assert (cm.committed_tokens[r, m:] == -1).all()
    # the SSM index is the last accepted node, which differs from accept_len
    # as soon as a sibling other than the first child is accepted
    assert (cm.mamba_state_index != acc.accept_len).any()
    flat = dd.ragged_hidden_gather_index(cm)
    assert flat.numel() == int(cm.num_committed.sum())


def tree_states(t, h0, root_tok, emb, a):
    """Toy recurrence h_v = a*h_parent(v) + emb[tok_v] for every node, root from h0.
    Vectorized by depth (like a tree-aware scan)."""
    R, N = t.tokens.shape
    tok = t.tokens.clone()
    tok[:, 0] = root_tok
    H = torch.zeros(R, N, h0.shape[-1])
    H[:, 0] = a * h0 + emb[root_tok]
    for d in range(1, t.max_depth + 1):
        sel = t.depths == d
        par = t.parents.clamp(min=0)
        hp = torch.gather(H, 1, par.unsqueeze(-1).expand(R, N, H.shape[-1]))
        H = torch.where(sel.unsqueeze(-1), a * hp + emb[tok], H)
    return H


def test_recurrent_state_from_last_accepted_node(dd):
    """Over many steps, the committed toy state (intermediate state of the last
    accepted node) equals sequential processing of all accepted tokens, bit for bit."""
    g = torch.Generator().manual_seed(0)
    R, L, V, B, Dh = 6, 4, 5, 12, 8
    emb = torch.randn(V, Dh, generator=g)
    a = torch.rand(Dh, generator=g) * 0.9 + 0.05
    state = torch.zeros(R, Dh)  # state after all committed tokens except the root
    root = torch.randint(0, V, (R,), generator=g)
    history = [[int(x)] for x in root]
    differs = 0
    for step in range(12):
        ids, lp = random_logprobs(g, R, L, V, min(B, V))
        t = dd.build_ddtree(ids, lp, B)
        # predictions that often follow a random child (deep, branching walks)
        pred = torch.randint(0, V, (R, B + 1), generator=g)
        kids_tok = t.tokens.clone()
        for r in range(R):
            for i in range(B + 1):
                kids = [j for j in range(1, B + 1) if int(t.parents[r, j]) == i]
                if kids and torch.rand((), generator=g) < 0.8:
                    pred[r, i] = kids_tok[r, kids[int(torch.randint(0, len(kids), (1,), generator=g))]]
        H = tree_states(t, state, root, emb, a)
        acc = dd.accept_greedy(t, pred)
        cm = dd.commit_maps(t, acc)
        new_state = H[torch.arange(R), cm.mamba_state_index]
        wrong_state = H[torch.arange(R), acc.accept_len]  # the chain-style bug
        for r in range(R):
            m = int(cm.num_committed[r])
            toks = cm.committed_tokens[r, :m].tolist()
            history[r].extend(toks)
        # sequential: process every committed token except the new root (bonus)
        for r in range(R):
            h = torch.zeros(Dh)
            for x in history[r][:-1]:
                h = a * h + emb[x]
            assert torch.equal(new_state[r], h)
            if not torch.equal(wrong_state[r], h):
                differs += 1
        state = new_state
        root = acc.bonus
    # committing state index accept_len instead would have been caught
    assert differs > 5
