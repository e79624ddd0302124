"""Plain per-request DDTree tree construction (the paper's heap procedure).

A reference written from the DDTree paper's description of tree construction:
full-vocabulary top-K and log-sum-exp per request, a copy to the host, then a
best-first heap over (negated score, rank tuple).  One deliberate detail: a
sibling's weight is computed as parent weight + lp(rank r+1) rather than
current - lp(r) + lp(r+1); the two are equal in exact arithmetic and this form
makes ties exact, so the result is defined by (score, rank tuple) alone.

Used as the baseline in tools/bench/ddtree.py and as an oracle in tests/ddtree.
"""

from __future__ import annotations

import heapq
from typing import List

import torch


def heap_tree_from_logprobs(ids, lps, budget: int, force_spine: bool = False):
    """ids, lps: per-depth sequences (L x K, host lists/arrays, sorted desc).

    Returns (tokens, depths, parents, ranks, scores) lists over nodes 1..n in
    pop order; parents use node indices with 0 = root."""
    L = len(lps)
    K = min(len(lps[0]), budget)
    tokens: List[int] = []
    depths: List[int] = []
    parents: List[int] = []
    ranks: List[int] = []
    scores: List[float] = []
    heap: list = []

    def add(parent, depth, rank, weight):
        tokens.append(int(ids[depth - 1][rank]))
        depths.append(depth)
        parents.append(parent)
        ranks.append(rank)
        scores.append(weight)
        return len(tokens)  # node index

    def push_successors(node, parent, parent_w, depth, rank, rtuple, weight, skip_child=False):
        if rank + 1 < K:
            w = parent_w + float(lps[depth - 1][rank + 1])
            heapq.heappush(heap, (-w, rtuple[:-1] + (rank + 1,), parent, depth, rank + 1, parent_w))
        if depth < L and not skip_child:
            w = weight + float(lps[depth][0])
            heapq.heappush(heap, (-w, rtuple + (0,), node, depth + 1, 0, weight))

    if force_spine:
        s = min(L, budget)
        w = 0.0
        spine = []
        for d in range(1, s + 1):
            pw = w
            w = pw + float(lps[d - 1][0])
            node = add(d - 1, d, 0, w)
            spine.append((node, d - 1, pw, d, w))
        for i, (node, parent, pw, d, w) in enumerate(spine):
            push_successors(node, parent, pw, d, 0, (0,) * d, w, skip_child=(i + 1 < len(spine)))
    else:
        w0 = float(lps[0][0])
        heapq.heappush(heap, (-w0, (0,), 0, 1, 0, 0.0))
    while heap and len(tokens) < budget:
        negw, rt, parent, depth, rank, parent_w = heapq.heappop(heap)
        w = -negw
        node = add(parent, depth, rank, w)
        push_successors(node, parent, parent_w, depth, rank, rt, w)
    return tokens, depths, parents, ranks, scores


def baseline_build(draft_logits: torch.Tensor, budget: int, force_spine: bool = False):
    """The paper's per-request procedure for one request: draft_logits [L, V]
    on any device.  Top-K and logsumexp in float32 on that device, one copy to
    the host, then the heap."""
    V = draft_logits.shape[-1]
    k = min(budget, V)
    x = draft_logits.float()
    vals, idx = torch.topk(x, k, dim=-1)
    lp = vals - torch.logsumexp(x, dim=-1, keepdim=True)
    lp = lp.cpu().numpy()
    idx = idx.cpu().numpy()
    return heap_tree_from_logprobs(idx, lp, budget, force_spine)


def baseline_visibility(parents: List[int]):
    """The paper's incremental (n+1)x(n+1) visibility matrix: row i copies its
    parent's row over [0, i) and sets the diagonal.  parents: nodes 1..n."""
    import numpy as np

    n = len(parents)
    vis = np.zeros((n + 1, n + 1), dtype=bool)
    vis[0, 0] = True
    for i, p in enumerate(parents, start=1):
        vis[i, :i] = vis[p, :i]
        vis[i, i] = True
    return vis
