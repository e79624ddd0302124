"""Small independent oracles for the DDTree tests (plain Python, no vectorization)."""

import itertools
import math

import torch


def random_logprobs(g, R, L, V, k, quantized=False):
    """Sorted per-depth log-probabilities and distinct ids.  quantized=True
    gives multiples of 1/4 (exact float sums, many ties)."""
    logits = torch.randn(R, L, V, generator=g) * 2
    if quantized:
        logits = (logits * 2).round() / 2
    lp = torch.log_softmax(logits, -1)
    if quantized:
        lp = (lp * 4).round() / 4
    lp, order = lp.sort(dim=-1, descending=True, stable=True)
    ids = torch.stack([torch.randperm(V, generator=g) for _ in range(R * L)]).view(R, L, V)
    ids = torch.gather(ids, 2, order)
    return ids[..., :k], lp[..., :k].float()


def all_prefixes(lp, K):
    """Every rank tuple of length 1..L with ranks < K, with its float64 left-fold score."""
    L = len(lp)
    out = []
    for d in range(1, L + 1):
        for rt in itertools.product(range(K), repeat=d):
            s = 0.0
            for i, r in enumerate(rt):
                s = s + float(lp[i][r])
            out.append((s, rt))
    return out


def topb_prefixes(lp, K, B):
    """The B best prefixes by (score desc, rank tuple asc), in that order."""
    pref = all_prefixes(lp, K)
    pref.sort(key=lambda x: (-x[0], x[1]))
    return [rt for _, rt in pref[:B]]


def best_closed_value(lp, K, B):
    """Max over ancestor-closed prefix sets of size exactly B of sum exp(score)
    (tree knapsack DP, independent of any ordering)."""
    L = len(lp)
    NEG = float("-inf")

    def solve(score, depth):
        # best[b] = max weight of a closed subtree of b nodes hanging below a
        # node at `depth` with path score `score` (node itself excluded)
        best = [0.0] + [NEG] * B
        if depth == L:
            return best
        for r in range(K):
            cs = score + float(lp[depth][r])
            sub = solve(cs, depth + 1)
            w = math.exp(cs)
            child = [NEG] * (B + 1)  # child subtree incl. the child
            for b in range(B):
                if sub[b] > NEG:
                    child[b + 1] = sub[b] + w
            new = list(best)
            for a in range(B + 1):
                if best[a] == NEG:
                    continue
                for c in range(1, B + 1 - a):
                    if child[c] > NEG and best[a] + child[c] > new[a + c]:
                        new[a + c] = best[a] + child[c]
            best = new
        return best

    return solve(0.0, 0)[B]


def tree_rank_tuples(tree, r):
    """Rank tuples of the real nodes of request r, in node order."""
    n = int(tree.num_nodes[r])
    par = tree.parents[r].tolist()
    rk = tree.ranks[r].tolist()
    out = [None] * (n + 1)
    out[0] = ()
    for i in range(1, n + 1):
        out[i] = out[par[i]] + (rk[i],)
    return out[1:]


def tree_token_paths(tree, r):
    n = int(tree.num_nodes[r])
    par = tree.parents[r].tolist()
    tok = tree.tokens[r].tolist()
    out = [()] * (n + 1)
    for i in range(1, n + 1):
        out[i] = out[par[i]] + (tok[i],)
    return out[1:]


def walk_oracle(tree, r, pred):
    """Plain-Python sample-and-walk on request r: returns (path, bonus)."""
    n = int(tree.num_nodes[r])
    par = tree.parents[r].tolist()
    tok = tree.tokens[r].tolist()
    children = {i: [] for i in range(n + 1)}
    for i in range(1, n + 1):
        children[par[i]].append(i)
    path = [0]
    cur = 0
    while True:
        nxt = [c for c in children[cur] if tok[c] == pred[cur]]
        assert len(nxt) <= 1
        if not nxt:
            break
        cur = nxt[0]
        path.append(cur)
    return path, pred[cur]
