"""Ancestor mask, positions, LCRS tree-verify arrays and the flattened custom mask."""

import torch

from .helpers import random_logprobs


def make_trees(dd, seed, R=5, L=5, V=6, B=17):
    g = torch.Generator().manual_seed(seed)
    ids, lp = random_logprobs(g, R, L, V, min(B, V))
    return dd.build_ddtree(ids, lp, B)


def closure_oracle(par):
    N = len(par)
    m = [[False] * N for _ in range(N)]
    for i in range(N):
        j = i
        while j != -1:
            m[i][j] = True
            j = par[j]
    return m


def test_ancestor_mask_and_positions(dd):
    for seed, (L, V, B) in enumerate([(5, 6, 17), (3, 2, 30), (1, 5, 4), (6, 3, 1)]):
        t = make_trees(dd, seed, L=L, V=V, B=B)
        anc = dd.ancestor_mask(t)
        R, N = t.parents.shape
        assert anc.shape == (R, N, N) and anc.dtype == torch.bool
        for r in range(R):
            assert anc[r].tolist() == closure_oracle(t.parents[r].tolist())
            assert anc[r].any(dim=1).all()  # no all-False row
        pl = torch.tensor([0, 3, 10, 7, 1])[:R]
        pos = dd.position_ids(t, pl)
        assert torch.equal(pos, pl.unsqueeze(1) + t.depths)
        assert (pos[:, 0] == pl).all()


def test_lcrs_arrays(dd):
    for seed, (L, V, B) in enumerate([(5, 6, 17), (3, 2, 30), (4, 4, 40), (2, 3, 1)]):
        t = make_trees(dd, seed, L=L, V=V, B=B)
        ri, nt, ns = dd.tree_verify_arrays(t)
        R, N = t.parents.shape
        assert torch.equal(ri, torch.arange(R * N).view(R, N))
        for r in range(R):
            par = t.parents[r].tolist()
            n = int(t.num_nodes[r])
            kids = {i: [j for j in range(1, N) if par[j] == i] for i in range(N)}
            for i in range(N):
                c = kids[i]
                assert nt[r, i] == (c[0] if c else -1)
                if i == 0 or par[i] == -1:
                    assert ns[r, i] == -1
                else:
                    sib = kids[par[i]]
                    k = sib.index(i)
                    assert ns[r, i] == (sib[k + 1] if k + 1 < len(sib) else -1)
            # traversal from the root reaches exactly the real nodes, each once,
            # and rebuilds the parents
            seen, rebuilt, stack = [0], {0: -1}, [0]
            while stack:
                u = stack.pop()
                c = int(nt[r, u])
                while c != -1:
                    assert c not in rebuilt
                    rebuilt[c] = u
                    seen.append(c)
                    stack.append(c)
                    c = int(ns[r, c])
            assert sorted(seen) == list(range(n + 1))
            assert all(rebuilt[i] == par[i] for i in seen)
            for i in range(n + 1, N):  # padding: isolated
                assert nt[r, i] == -1 and ns[r, i] == -1


def test_flat_custom_mask_layout(dd):
    t = make_trees(dd, 7, R=4, B=9)
    N = t.tokens.shape[1]
    anc = dd.ancestor_mask(t)
    pl = torch.tensor([0, 5, 2, 11])
    m = dd.flat_custom_mask(anc, pl, int(pl.sum()))
    assert m.dtype == torch.bool and m.numel() == int(pl.sum()) * N + 4 * N * N
    off = 0
    for r in range(4):
        p = int(pl[r])
        blk = m[off : off + N * (p + N)].view(N, p + N)
        assert blk[:, :p].all()
        assert torch.equal(blk[:, p:], anc[r])
        assert blk.any(dim=1).all()
        off += N * (p + N)
    assert off == m.numel()
    # without the host-side sum (reads it itself)
    assert torch.equal(dd.flat_custom_mask(anc, pl), m)


def test_build_verify_inputs(dd):
    t = make_trees(dd, 8, R=3, L=4, V=5, B=40)  # 5+25+... > 40, but force padding with V=2 below
    g = torch.Generator().manual_seed(0)
    ids, lp = random_logprobs(g, 3, 3, 2, 2)
    t = dd.build_ddtree(ids, lp, 20)  # only 14 prefixes exist: 6 padding nodes
    assert t.num_nodes.tolist() == [14, 14, 14]
    root = torch.tensor([7, 8, 9])
    pl = torch.tensor([4, 0, 2])
    vi = dd.build_verify_inputs(t, root, pl, prefix_lens_sum=6)
    N = 21
    dt = vi.draft_token.view(3, N)
    assert dt[:, 0].tolist() == [7, 8, 9]
    assert torch.equal(dt[:, 1:15], t.tokens[:, 1:15])
    assert (dt[:, 15:] == root.unsqueeze(1)).all()  # padding: a valid id
    assert torch.equal(vi.positions.view(3, N), pl.unsqueeze(1) + t.depths)
    assert vi.custom_mask.numel() == 6 * N + 3 * N * N
