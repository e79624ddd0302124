"""Tree construction: budget/shape invariants, exactness vs the paper's heap,
optimality vs brute force, nesting, chain equivalence, top-K log-probs."""

import math

import pytest
import torch

from .helpers import best_closed_value, random_logprobs, topb_prefixes, tree_rank_tuples, tree_token_paths
from tests.ddtree.baseline import heap_tree_from_logprobs


def n_prefixes(L, K):
    return sum(K ** d for d in range(1, L + 1))


@pytest.mark.parametrize("quantized", [False, True])
@pytest.mark.parametrize("force_spine", [False, True])
def test_matches_heap_node_for_node(dd, quantized, force_spine):
    g = torch.Generator().manual_seed(11 + quantized + 2 * force_spine)
    for _ in range(60):
        R = 4
        L = int(torch.randint(1, 7, (1,), generator=g))
        V = int(torch.randint(1, 9, (1,), generator=g))
        B = int(torch.randint(1, 40, (1,), generator=g))
        ids, lp = random_logprobs(g, R, L, V, min(B, V), quantized)
        t = dd.build_ddtree(ids, lp, B, force_spine=force_spine)
        for r in range(R):
            tok, dep, par, rk, sc = heap_tree_from_logprobs(ids[r].tolist(), lp[r].tolist(), B, force_spine)
            n = len(tok)
            assert int(t.num_nodes[r]) == n
            assert t.tokens[r, 1 : n + 1].tolist() == tok
            assert t.depths[r, 1 : n + 1].tolist() == dep
            assert t.parents[r, 1 : n + 1].tolist() == par
            assert t.ranks[r, 1 : n + 1].tolist() == rk
            assert t.scores[r, 1 : n + 1].tolist() == sc


def test_budget_and_shape_invariants(dd):
    g = torch.Generator().manual_seed(1)
    for _ in range(40):
        R = 3
        L = int(torch.randint(1, 6, (1,), generator=g))
        V = int(torch.randint(1, 7, (1,), generator=g))
        B = int(torch.randint(1, 30, (1,), generator=g))
        ids, lp = random_logprobs(g, R, L, V, min(B, V))
        t = dd.build_ddtree(ids, lp, B)
        N = B + 1
        for name in ("tokens", "depths", "parents", "ranks", "scores", "valid"):
            assert getattr(t, name).shape == (R, N), name
        assert t.tokens.dtype == torch.int64 and t.parents.dtype == torch.int64
        for r in range(R):
            n = int(t.num_nodes[r])
            assert n == min(B, n_prefixes(L, min(B, V)))
            assert t.valid[r].tolist() == [True] * (n + 1) + [False] * (B - n)
            par = t.parents[r].tolist()
            dep = t.depths[r].tolist()
            assert par[0] == -1 and dep[0] == 0
            for i in range(1, n + 1):
                assert 0 <= par[i] < i
                assert dep[i] == dep[par[i]] + 1
                assert 1 <= dep[i] <= L
            for i in range(n + 1, N):  # padding
                assert par[i] == -1 and dep[i] == 0 and t.ranks[r, i] == -1
            # siblings carry distinct tokens; scores non-increasing in node order
            paths = tree_token_paths(t, r)
            assert len(set(paths)) == len(paths)
            sc = t.scores[r, 1 : n + 1].tolist()
            assert all(a >= b for a, b in zip(sc, sc[1:]))


def test_optimal_vs_brute_force(dd):
    """L<=4, V<=6, budget<=10: node set = top-B prefixes (ties by rank tuple),
    and the surrogate equals the max over all ancestor-closed trees (DP)."""
    g = torch.Generator().manual_seed(5)
    cases = 0
    for trial in range(60):
        L = int(torch.randint(1, 5, (1,), generator=g))
        V = int(torch.randint(2, 7, (1,), generator=g))
        B = int(torch.randint(1, 11, (1,), generator=g))
        K = min(B, V)
        ids, lp = random_logprobs(g, 2, L, V, K, quantized=trial % 2 == 1)
        t = dd.build_ddtree(ids, lp, B)
        sv = dd.surrogate_value(t)
        for r in range(2):
            lpr = lp[r].tolist()
            if n_prefixes(L, K) < B:
                continue
            want = topb_prefixes(lpr, K, B)
            assert tree_rank_tuples(t, r) == want
            if L <= 3 or K <= 3:
                best = best_closed_value(lpr, K, B)
                assert math.isclose(float(sv[r]) - 1.0, best, rel_tol=1e-9, abs_tol=1e-12)
                cases += 1
    assert cases > 20


def test_surrogate_dominates_chain(dd):
    g = torch.Generator().manual_seed(9)
    ids, lp = random_logprobs(g, 16, 6, 8, 8)
    for B in range(1, 13):
        t = dd.build_ddtree(ids, lp, B)
        chain = dd.build_ddtree(ids[..., :1], lp[..., :1], B)
        assert (dd.surrogate_value(t) >= dd.surrogate_value(chain) - 1e-12).all()


def test_nesting(dd):
    g = torch.Generator().manual_seed(3)
    for quantized in (False, True):
        ids, lp = random_logprobs(g, 6, 5, 6, 6, quantized)
        prev = None
        for B in range(1, 40):
            t = dd.build_ddtree(ids, lp, B)
            cur = [set(tree_token_paths(t, r)) for r in range(6)]
            if prev is not None:
                for a, b in zip(prev, cur):
                    assert a <= b and len(b) == len(a) + 1
            prev = cur


def test_chain_equivalence_one_hot(dd):
    """One-hot drafts: the tree starts with the DFlash chain (argmax tokens at
    depths 1..L) and force_spine with budget L is exactly that chain."""
    g = torch.Generator().manual_seed(4)
    R, L, V = 5, 7, 50
    arg = torch.randint(0, V, (R, L), generator=g)
    logits = torch.full((R, L, V), -1e4)
    logits.scatter_(2, arg.unsqueeze(-1), 0.0)
    for B in (1, 3, L, L + 5, 40):
        ids, lp = dd.topk_logprobs(logits, min(B, V))
        for fs in (False, True):
            t = dd.build_ddtree(ids, lp, B, force_spine=fs)
            s = min(B, L)
            assert t.tokens[:, 1 : s + 1].tolist() == arg[:, :s].tolist()
            assert t.depths[:, 1 : s + 1].tolist() == [list(range(1, s + 1))] * R
            assert t.parents[:, 1 : s + 1].tolist() == [list(range(0, s))] * R
    # random (not one-hot) drafts: force_spine with budget L is the argmax chain
    logits = torch.randn(R, L, V, generator=g)
    ids, lp = dd.topk_logprobs(logits, L)
    t = dd.build_ddtree(ids, lp, L, force_spine=True)
    assert t.tokens[:, 1:].tolist() == logits.argmax(-1).tolist()
    assert t.parents[:, 1:].tolist() == [list(range(0, L))] * R


@pytest.mark.parametrize("method", ["torch", "chunked"])
def test_topk_logprobs(dd, method):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 4, 5000, generator=g) * 3
    for k in (1, 7, 64, 300):
        ids, lp = dd.topk_logprobs(x, k, method=method)
        assert ids.shape == (3, 4, k) and lp.dtype == torch.float32
        ref = torch.log_softmax(x, -1)
        rv, ri = ref.topk(k, -1)
        assert torch.equal(ids, ri)
        assert torch.allclose(lp, rv, atol=1e-5)
        assert (lp[..., 1:] <= lp[..., :-1]).all()
    ids, lp = dd.topk_logprobs(x[0, :, :6], 10)  # K = min(k, V), 2-D input
    assert ids.shape == (4, 6)
