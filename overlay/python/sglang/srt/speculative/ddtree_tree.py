"""DDTree: pure tree logic for diffusion-draft trees (torch only).

This module holds everything of a DDTree speculative step that does not need a
model: per-position top-K log-probabilities, the best-first tree of the
``budget`` most probable draft prefixes, the verify inputs in SGLang's
tree-verify layout, acceptance (greedy and sampling) and the commit maps.

Everything is batched over requests, runs on CPU or GPU, has static shapes
(``N = budget + 1`` verify tokens per request) and, on GPU, performs no host
synchronisation inside a step, so a whole step can be captured in a CUDA graph.
Exceptions are marked: ``flat_custom_mask`` needs the total mask size on the
host (SGLang has ``seq_lens_sum`` there) and ``*_ragged`` helpers return
variable-size tensors.

It deliberately imports nothing from SGLang; it is laid into the patched tree at
``python/sglang/srt/speculative/ddtree_tree.py``.

Conventions
-----------
* ``R`` requests, ``L`` draft positions (block size - 1), ``V`` vocabulary,
  ``B`` node budget (root not counted), ``N = B + 1`` verify tokens.
* Node 0 is the root (the last committed token, whose KV is not yet cached).
  Nodes ``1..n`` (``n = num_nodes[r] <= B``) are real tree nodes in the
  paper's pop order: non-increasing path score, ties broken by the rank tuple
  (lexicographically smaller first, a prefix before its extensions).
  ``parents[i] < i`` always.
* Nodes ``n+1..B`` are padding: parent -1, depth 0, not reachable from the root
  in the LCRS arrays, and they see only themselves (plus the cached prefix).
* The score of a path is the float64 left fold ``((lp_1 + lp_2) + ...) + lp_d``
  of its per-depth float32 log-probabilities; this is exactly what a
  heap implementation that computes a child's weight as "parent weight + lp"
  produces, so both agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
import importlib
import importlib.util
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

__all__ = [
    "DDTree",
    "TreeVerifyInputs",
    "AcceptResult",
    "CommitMaps",
    "topk_logprobs",
    "build_ddtree",
    "surrogate_value",
    "ancestor_mask",
    "position_ids",
    "tree_verify_arrays",
    "flat_custom_mask",
    "build_verify_inputs",
    "accept_greedy",
    "sample_per_node",
    "accept_sampling",
    "commit_maps",
    "ragged_hidden_gather_index",
]

# The speculative_eagle_topk value that switches upstream's EAGLE verify paths
# into tree mode (any value above 1 does; ddtree_algo sets it, ddtree_worker
# passes it to the verify input).  Here, in the module both import, so
# neither imports the other.
TREE_MODE_TOPK = 2

_INVALID_KEY = 1 << 62


# --------------------------------------------------------------------------
# Optional Triton kernels (ddtree_triton.py, next to this file)
# --------------------------------------------------------------------------

_TRITON = None  # None: not tried; False: unavailable; else the module


def triton_kernels():
    """The fused Triton kernels module, or None when triton does not import.

    Imported lazily: as ``<package>.ddtree_triton`` inside SGLang's tree, by
    file path when this module itself was loaded by path."""
    global _TRITON
    if _TRITON is None:
        try:
            if __package__:
                _TRITON = importlib.import_module(__package__ + ".ddtree_triton")
            else:
                path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddtree_triton.py")
                spec = importlib.util.spec_from_file_location("ddtree_triton", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                _TRITON = mod
        except Exception:  # no triton, or no working backend
            _TRITON = False
    return _TRITON or None


def _triton_for(device: torch.device):
    """The kernels module when the fused path applies to tensors on ``device``
    (CUDA and triton imports), else None.  CPU keeps the pure-torch path."""
    if device.type != "cuda":
        return None
    return triton_kernels()


# --------------------------------------------------------------------------
# Top-K log-probabilities
# --------------------------------------------------------------------------


def _logsumexp_rows(x: torch.Tensor, rows_per_chunk: int) -> torch.Tensor:
    """float32 logsumexp over the last dim, in row chunks (keeps temporaries small)."""
    out = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    for i in range(0, x.shape[0], rows_per_chunk):
        xx = x[i : i + rows_per_chunk].float()
        m = xx.amax(dim=-1, keepdim=True)
        # rows that are entirely -inf: keep -inf rather than NaN
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = (xx - m_safe).exp_().sum(dim=-1)
        out[i : i + rows_per_chunk] = s.log_().add_(m_safe.squeeze(-1))
    return out


def _topk_chunked(x: torch.Tensor, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k over the last dim via chunk maxima (fast on CPU for large V).

    The k best chunks by their maximum contain a top-k set: every element of a
    top-k set lies in a chunk whose maximum is at least that element.  Among
    equal values the order (and, at the k-th boundary, the choice) may differ
    from ``torch.topk``, which does not specify it either.
    """
    R, V = x.shape
    c = max(4, min(64, int((V / (8 * k)) ** 0.5 * 4)))
    nfull = V // c
    if nfull <= k:
        return torch.topk(x, k, dim=-1)
    cm = x[:, : nfull * c].reshape(R, nfull, c).amax(dim=-1)
    _, ci = torch.topk(cm, k, dim=-1, sorted=False)
    idx = (ci.unsqueeze(-1) * c + torch.arange(c, device=x.device)).reshape(R, k * c)
    if nfull * c < V:
        tail = torch.arange(nfull * c, V, device=x.device).expand(R, -1)
        idx = torch.cat([idx, tail], dim=1)
    vals = torch.gather(x, 1, idx)
    v, j = torch.topk(vals, k, dim=-1)
    return v, torch.gather(idx, 1, j)


def topk_logprobs(
    draft_logits: torch.Tensor, k: int, *, method: str = "auto"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-position top-K token ids and log-probabilities over the full vocabulary.

    draft_logits: [L, V] or [R, L, V] (any float dtype).
    Returns (ids int64, logprobs float32), each [..., L, K] with K = min(k, V),
    sorted by non-increasing log-probability.  logprobs = logit - logsumexp(all
    V logits of that position), computed in float32 (as the paper's code does).

    method: "torch" (torch.topk), "chunked" (exact chunk-maxima top-k, faster
    on CPU for large V), "triton" (one fused pass over the logits, see
    ddtree_triton; among equal values the smaller token id first), "auto"
    (triton on CUDA when triton imports and k <= 256; else chunked on CPU
    when V >= 4096, else torch).  A token whose logit is -inf gets log-prob
    -inf (also in an all -inf row, where logit - logsumexp would be NaN).
    """
    squeeze = draft_logits.dim() == 2
    x = draft_logits.unsqueeze(0) if squeeze else draft_logits
    R, L, V = x.shape
    k = min(int(k), V)
    flat = x.reshape(R * L, V)
    if method == "auto":
        tk = _triton_for(flat.device)
        if tk is not None and tk.supports_topk(V, k):
            method = "triton"
        else:
            method = "chunked" if (flat.device.type == "cpu" and V >= 4096) else "torch"
    if method == "triton":
        tk = triton_kernels()
        if tk is None:
            raise RuntimeError("method='triton' needs triton")
        ids, lp = tk.fused_topk_logprobs(flat if flat.stride(-1) == 1 else flat.contiguous(), k)
        ids = ids.reshape(R, L, k)
        lp = lp.reshape(R, L, k)
        return (ids[0], lp[0]) if squeeze else (ids, lp)
    if method == "chunked":
        flat32 = flat.float()
        vals, ids = _topk_chunked(flat32, k)
        lse = _logsumexp_rows(flat32, 16)
    elif method == "torch":
        vals, ids = torch.topk(flat, k, dim=-1)
        vals = vals.float()
        lse = torch.logsumexp(flat.float(), dim=-1)
    else:
        raise ValueError(f"unknown method {method!r}")
    lp = torch.where(vals == float("-inf"), float("-inf"), vals - lse.unsqueeze(-1))
    ids = ids.reshape(R, L, k)
    lp = lp.reshape(R, L, k)
    if squeeze:
        return ids[0], lp[0]
    return ids, lp


# --------------------------------------------------------------------------
# Tree construction
# --------------------------------------------------------------------------


@dataclass
class DDTree:
    """A batch of DDTree trees, padded to N = budget + 1 nodes each.

    tokens   [R, N] int64   node tokens; tokens[:, 0] (root) and padding are 0
                            (``build_verify_inputs`` fills them with the root token)
    depths   [R, N] int64   1..L for nodes, 0 for the root and padding
    parents  [R, N] int64   parent node index (< own index); -1 for root and padding
    ranks    [R, N] int64   top-K rank of the node's token at its depth; -1 root/pad
    scores   [R, N] float64 path log-weight; 0 for the root, -inf for padding
    valid    [R, N] bool    root and real nodes True, padding False
    num_nodes [R]  int64    n (real nodes, root excluded)
    max_depth int           L (static bound used by mask/acceptance loops)
    """

    tokens: torch.Tensor
    depths: torch.Tensor
    parents: torch.Tensor
    ranks: torch.Tensor
    scores: torch.Tensor
    valid: torch.Tensor
    num_nodes: torch.Tensor
    max_depth: int
    # filled by the fused (Triton) builder, which computes them in the same
    # kernel; None otherwise (ancestor_mask / tree_verify_arrays compute them)
    ancestor: Optional[torch.Tensor] = None
    next_token: Optional[torch.Tensor] = None
    next_sibling: Optional[torch.Tensor] = None

    @property
    def budget(self) -> int:
        return self.tokens.shape[1] - 1

    @property
    def num_verify_tokens(self) -> int:
        return self.tokens.shape[1]

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]


_PAIR_CACHE: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}


def _candidate_pairs(cap: int, kc: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """Static (frontier slot i, rank r) pairs with (i+1)(r+1) <= cap, r < kc.

    A candidate (i, r) is preceded by the (i+1)(r+1)-1 candidates (i'<=i,
    r'<=r) and by its own ancestors, so it can be selected only when
    (i+1)(r+1) <= budget - (depth-1) = cap.
    """
    key = (cap, kc, str(device))
    hit = _PAIR_CACHE.get(key)
    if hit is not None:
        return hit
    ii: List[int] = []
    rr: List[int] = []
    for i in range(cap):
        rmax = min(kc, cap // (i + 1))
        if rmax <= 0:
            break
        ii.extend([i] * rmax)
        rr.extend(range(rmax))
    res = (
        torch.tensor(ii, dtype=torch.long, device=device),
        torch.tensor(rr, dtype=torch.long, device=device),
    )
    _PAIR_CACHE[key] = res
    return res


def _gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return torch.gather(x, 1, idx)


def build_ddtree(
    ids: torch.Tensor,
    logprobs: torch.Tensor,
    budget: int,
    *,
    force_spine: bool = False,
    method: str = "auto",
) -> DDTree:
    """Best-first DDTree of the ``budget`` most probable draft prefixes.

    ids, logprobs: [R, L, K] (or [L, K]) as returned by ``topk_logprobs``; each
    row must be sorted by non-increasing log-probability.
    budget: number of tree nodes (root excluded), >= 1.
    force_spine: if True, the rank-0 chain of length min(L, budget) is put in
    the tree first (nodes 1..s in depth order) and the remaining budget-s nodes
    are the best other prefixes.  Off by default (paper-exact).

    The result equals the paper's heap procedure (pop order, tie-break by rank
    tuple) node for node.  Method: depth by depth, keep G = the best ``budget``
    prefixes of depth <= d; the new candidates are children of G's deepest
    level only, pruned by the static rule (i+1)(r+1) <= budget-d+1 (frontier
    slot i in score order, rank r), then merged with G by a two-key stable sort
    (score desc, lexicographic rank-tuple key asc).  L fixed steps; no host sync.

    method: "torch" (the above), "triton" (ddtree_triton's one-kernel heap
    procedure, which also fills ``ancestor``, ``next_token`` and
    ``next_sibling``; not with force_spine), "auto" (triton on CUDA when triton
    imports, force_spine is off and budget <= 256; else torch).  Both give the
    same tree.
    """
    squeeze = ids.dim() == 2
    if squeeze:
        ids = ids.unsqueeze(0)
        logprobs = logprobs.unsqueeze(0)
    if budget < 1:
        raise ValueError("budget must be >= 1")
    R, L, K = ids.shape
    if method == "auto":
        tk = _triton_for(ids.device)
        use = tk is not None and not force_spine and budget <= 256 and tk.supports_build(L, K, int(budget))
        method = "triton" if use else "torch"
    if method == "triton":
        tk = triton_kernels()
        if tk is None or force_spine or not tk.supports_build(L, K, int(budget)):
            raise ValueError("method='triton' needs triton, force_spine off and a supported size")
        f = tk.fused_build(ids, logprobs.float(), int(budget))
        return DDTree(max_depth=L, **f)
    if method != "torch":
        raise ValueError(f"unknown method {method!r}")
    B = int(budget)
    dev = ids.device
    kc = min(K, B)
    ids = ids[:, :, :kc].long()
    lp = logprobs[:, :, :kc].double()
    W = kc + 1  # radix of the lexicographic key
    ninf = float("-inf")
    arB = torch.arange(B, device=dev).expand(R, B)

    # ---- G: best B prefixes of depth <= d, in priority (= pop) order --------
    g_score = torch.full((R, B), ninf, dtype=torch.float64, device=dev)
    g_key = torch.full((R, B), _INVALID_KEY, dtype=torch.long, device=dev)
    # payload fields: 0 parent (G slot, -1 = root), 1 depth, 2 token, 3 rank, 4 spine
    g_pay = torch.zeros((R, B, 5), dtype=torch.long, device=dev)
    g_pay[:, :, 0] = -1
    g_pay[:, :, 3] = -1
    g_score[:, :kc] = lp[:, 0, :]
    g_key[:, :kc] = torch.arange(kc, device=dev)
    g_pay[:, :kc, 1] = 1
    g_pay[:, :kc, 2] = ids[:, 0, :]
    g_pay[:, :kc, 3] = torch.arange(kc, device=dev)
    g_pay[:, 0, 4] = 1
    # frontier = depth-1 nodes in true order (rank order): G slots 0..kc-1
    f_pos = torch.full((R, B), -1, dtype=torch.long, device=dev)
    f_pos[:, :kc] = torch.arange(kc, device=dev)

    for d in range(2, L + 1):
        cap = B - (d - 1)
        if cap < 1:
            break
        ci, cr = _candidate_pairs(cap, kc, dev)
        P = ci.numel()
        fp = f_pos.index_select(1, ci)  # [R, P] G slot of the parent, -1 if none
        fvalid = fp >= 0
        fpc = fp.clamp(min=0)
        par_score = _gather(g_score, fpc)
        par_key = _gather(g_key, fpc)
        lp_d = lp[:, d - 1].index_select(1, cr)
        c_score = torch.where(fvalid, par_score + lp_d, ninf)
        c_key = torch.where(fvalid, par_key * W + (cr + 1), _INVALID_KEY)
        c_pay = torch.empty((R, P, 5), dtype=torch.long, device=dev)
        c_pay[:, :, 0] = fp
        c_pay[:, :, 1] = d
        c_pay[:, :, 2] = ids[:, d - 1].index_select(1, cr)
        c_pay[:, :, 3] = cr
        if force_spine:
            par_spine = _gather(g_pay[:, :, 4], fpc)
            c_sp = fvalid & (par_spine == 1) & (cr == 0)
            # the spine child is added separately below (it must never be pruned)
            c_score = torch.where(c_sp, ninf, c_score)
            c_key = torch.where(c_sp, _INVALID_KEY, c_key)
            c_pay[:, :, 4] = 0
            # spine parent: with force_spine, G slots 0..d-2 hold the spine
            sp_slot = d - 2
            s_score = g_score[:, sp_slot : sp_slot + 1] + lp[:, d - 1, 0:1]
            s_key = g_key[:, sp_slot : sp_slot + 1] * W + 1
            s_pay = torch.empty((R, 1, 5), dtype=torch.long, device=dev)
            s_pay[:, :, 0] = sp_slot
            s_pay[:, :, 1] = d
            s_pay[:, :, 2] = ids[:, d - 1, 0:1]
            s_pay[:, :, 3] = 0
            s_pay[:, :, 4] = 1
            c_score = torch.cat([c_score, s_score], 1)
            c_key = torch.cat([c_key, s_key], 1)
            c_pay = torch.cat([c_pay, s_pay], 1)
        else:
            c_pay[:, :, 4] = 0

        gk = torch.where(g_key == _INVALID_KEY, _INVALID_KEY, g_key * W)
        p_score = torch.cat([g_score, c_score], 1)
        p_key = torch.cat([gk, c_key], 1)
        p_pay = torch.cat([g_pay, c_pay], 1)

        # two-key stable sort: key asc, then score desc (then spine first)
        o1 = torch.argsort(p_key, dim=1, stable=True)
        s1 = _gather(p_score, o1)
        _, o2 = torch.sort(s1, dim=1, descending=True, stable=True)
        order = _gather(o1, o2)
        if force_spine:
            sp = _gather(p_pay[:, :, 4], order)
            _, o3 = torch.sort(sp, dim=1, descending=True, stable=True)
            order = _gather(order, o3)
        sel = order[:, :B]

        new_score = _gather(p_score, sel)
        new_key = _gather(p_key, sel)
        new_pay = torch.gather(p_pay, 1, sel.unsqueeze(-1).expand(R, B, 5))
        new_valid = new_key != _INVALID_KEY
        # remap parents (old G slots) to new G slots
        inv = torch.full((R, p_score.shape[1]), -1, dtype=torch.long, device=dev)
        inv.scatter_(1, sel, arB)
        op = new_pay[:, :, 0]
        new_pay[:, :, 0] = torch.where(op >= 0, _gather(inv, op.clamp(min=0)), -1)
        # lexicographic (preorder) rank among the selected
        ok = torch.argsort(new_key, dim=1)
        pre = torch.empty_like(ok)
        pre.scatter_(1, ok, arB)
        g_key = torch.where(new_valid, pre, _INVALID_KEY)
        g_score = new_score
        g_pay = new_pay

        # frontier: the depth-d nodes, in true (score, key) order
        is_new = new_valid & (new_pay[:, :, 1] == d)
        if force_spine:
            is_sp = is_new & (new_pay[:, :, 4] == 1)
            is_ns = is_new & ~is_sp
            has_sp = is_sp.any(dim=1, keepdim=True)
            sp_i = torch.argmax(is_sp.to(torch.int8), dim=1, keepdim=True)
            sp_score = _gather(g_score, sp_i)
            sp_key = _gather(g_key, sp_i)
            before = is_ns & ((g_score > sp_score) | ((g_score == sp_score) & (g_key < sp_key)))
            n_before = before.sum(dim=1, keepdim=True)
            pos_ns = torch.cumsum(is_ns.long(), 1) - 1 + (~before & has_sp).long()
            slot = torch.where(is_ns, pos_ns, torch.where(is_sp, n_before.expand(R, B), B))
        else:
            slot = torch.where(is_new, torch.cumsum(is_new.long(), 1) - 1, B)
        f_full = torch.full((R, B + 1), -1, dtype=torch.long, device=dev)
        f_full.scatter_(1, slot, arB)
        f_pos = f_full[:, :B]

    # ---- outputs, node i = G slot i-1 ---------------------------------------
    valid_nodes = g_key != _INVALID_KEY
    N = B + 1
    tokens = torch.zeros((R, N), dtype=torch.long, device=dev)
    depths = torch.zeros((R, N), dtype=torch.long, device=dev)
    parents = torch.full((R, N), -1, dtype=torch.long, device=dev)
    ranks = torch.full((R, N), -1, dtype=torch.long, device=dev)
    scores = torch.full((R, N), ninf, dtype=torch.float64, device=dev)
    scores[:, 0] = 0.0
    tokens[:, 1:] = torch.where(valid_nodes, g_pay[:, :, 2], 0)
    depths[:, 1:] = torch.where(valid_nodes, g_pay[:, :, 1], 0)
    parents[:, 1:] = torch.where(valid_nodes, g_pay[:, :, 0] + 1, -1)
    ranks[:, 1:] = torch.where(valid_nodes, g_pay[:, :, 3], -1)
    scores[:, 1:] = torch.where(valid_nodes, g_score, ninf)
    valid = torch.cat([torch.ones((R, 1), dtype=torch.bool, device=dev), valid_nodes], 1)
    tree = DDTree(
        tokens=tokens,
        depths=depths,
        parents=parents,
        ranks=ranks,
        scores=scores,
        valid=valid,
        num_nodes=valid_nodes.sum(dim=1),
        max_depth=L,
    )
    return tree


def surrogate_value(tree: DDTree) -> torch.Tensor:
    """Expected accepted length (bonus included) under the factorized draft model:
    1 + sum over nodes of exp(path score).  [R] float64."""
    s = torch.where(tree.valid, tree.scores, float("-inf"))
    s = s.clone()
    s[:, 0] = float("-inf")
    return 1.0 + torch.exp(s).sum(dim=1)


# --------------------------------------------------------------------------
# Verify inputs
# --------------------------------------------------------------------------


def ancestor_mask(tree: DDTree) -> torch.Tensor:
    """[R, N, N] bool; [r, i, j] True iff j == i or j is an ancestor of i.

    Padding nodes see only themselves.  Built by pointer jumping along parents
    (max_depth gather+scatter steps, no host sync), unless the fused builder
    already computed it."""
    if tree.ancestor is not None:
        return tree.ancestor
    R, N = tree.parents.shape
    dev = tree.parents.device
    ext = torch.zeros((R, N * N + 1), dtype=torch.bool, device=dev)  # last column: dump
    rows = torch.arange(N, device=dev).expand(R, N)
    ext[:, : N * N].view(R, N, N).diagonal(dim1=1, dim2=2).fill_(True)
    anc = tree.parents
    for _ in range(tree.max_depth):
        has = anc >= 0
        ext.scatter_(1, torch.where(has, rows * N + anc, N * N), True)
        anc = torch.where(has, _gather(tree.parents, anc.clamp(min=0)), -1)
    return ext[:, : N * N].view(R, N, N)


def position_ids(tree: DDTree, prefix_lens: torch.Tensor) -> torch.Tensor:
    """[R, N] int64: prefix_len for the root and padding, prefix_len + depth for nodes.

    prefix_lens[r] = number of tokens already in the KV cache (the root's position)."""
    return prefix_lens.to(tree.depths.device).long().unsqueeze(1) + tree.depths


_FLAT_INDEX: Dict[tuple, torch.Tensor] = {}


def flat_node_index(R: int, N: int, device) -> torch.Tensor:
    """[R, N] int64, [r, k] = r * N + k: a view of one tensor kept per (N, device) and
    grown to the largest R asked for, so that a step does not launch the arange again.
    Its readers (EAGLE's verify kernels, the backends' copies) only read it. Inside a
    CUDA-graph capture it is made afresh (a capture's tensors are the graph's)."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return torch.arange(R * N, device=device).view(R, N)
    key = (int(N), device)
    have = _FLAT_INDEX.get(key)
    if have is None or have.shape[0] < R:
        have = torch.arange(max(R, 1) * N, device=device).view(max(R, 1), N)
        _FLAT_INDEX[key] = have
    return have[:R]


def tree_verify_arrays(tree: DDTree) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SGLang's tree-verify arrays (EAGLE topk>1 layout), each [R, N] int64.

    retrive_index[r, k]        = r * N + k
    retrive_next_token[r, k]   = first (smallest-index) child of k, or -1
    retrive_next_sibling[r, k] = next larger-index sibling of k, or -1
    Padding nodes have no links and no node links to them, so they are
    unreachable from the root."""
    R, N = tree.parents.shape
    dev = tree.parents.device
    retrive_index = flat_node_index(R, N, dev)
    if tree.next_token is not None and tree.next_sibling is not None:
        return retrive_index, tree.next_token, tree.next_sibling
    idx = torch.arange(N, device=dev).expand(R, N)
    par = tree.parents
    has_par = par >= 0
    # first child: min child index per parent (slot N is a dump for no parent)
    fc = torch.full((R, N + 1), N, dtype=torch.long, device=dev)
    fc.scatter_reduce_(1, torch.where(has_par, par, N), idx, reduce="amin", include_self=True)
    fc = fc[:, :N]
    next_token = torch.where(fc < N, fc, -1)
    # next sibling: sort by (parent, index); parentless nodes get unique groups
    group = torch.where(has_par, par, N + idx)
    key = group * N + idx
    o = torch.argsort(key, dim=1)
    g_sorted = _gather(group, o)
    nxt_same = torch.zeros((R, N), dtype=torch.bool, device=dev)
    nxt_same[:, :-1] = g_sorted[:, 1:] == g_sorted[:, :-1]
    nxt_node = torch.full((R, N), -1, dtype=torch.long, device=dev)
    nxt_node[:, :-1] = o[:, 1:]
    sib_sorted = torch.where(nxt_same, nxt_node, -1)
    next_sibling = torch.empty_like(sib_sorted)
    next_sibling.scatter_(1, o, sib_sorted)
    return retrive_index, next_token, next_sibling


def flat_custom_mask(
    anc: torch.Tensor, prefix_lens: torch.Tensor, prefix_lens_sum: Optional[int] = None
) -> torch.Tensor:
    """Flattened bool custom mask for a batch (SGLang FULL_MASK layout, True = attend).

    For request r a row-major block [N, prefix_len_r + N]: prefix columns all
    True, tree columns = ancestor mask; blocks concatenated over requests.
    Total size sum(prefix_lens) * N + R * N * N.  ``prefix_lens_sum`` should be
    passed from the host (otherwise it is read with a sync)."""
    R, N, _ = anc.shape
    dev = anc.device
    pl = prefix_lens.to(dev).long()
    if prefix_lens_sum is None:
        prefix_lens_sum = int(pl.sum().item())
    total = prefix_lens_sum * N + R * N * N
    out = torch.ones(total, dtype=torch.bool, device=dev)
    block = (pl + N) * N
    off = torch.cumsum(block, 0) - block  # [R]
    i = torch.arange(N, device=dev).view(1, N, 1)
    j = torch.arange(N, device=dev).view(1, 1, N)
    row_len = (pl + N).view(R, 1, 1)
    pos = off.view(R, 1, 1) + i * row_len + pl.view(R, 1, 1) + j
    out[pos.reshape(-1)] = anc.reshape(-1)
    return out


@dataclass
class TreeVerifyInputs:
    """Everything a tree-verify forward needs, flattened over the batch.

    draft_token  [R*N] int64  root token at k=0, node tokens, padding = root token
    positions    [R*N] int64
    retrive_index / retrive_next_token / retrive_next_sibling  [R, N] int64
    custom_mask  flat bool (FULL_MASK layout) or None when not requested
    ancestor     [R, N, N] bool
    """

    draft_token: torch.Tensor
    positions: torch.Tensor
    retrive_index: torch.Tensor
    retrive_next_token: torch.Tensor
    retrive_next_sibling: torch.Tensor
    custom_mask: Optional[torch.Tensor]
    ancestor: torch.Tensor


def build_verify_inputs(
    tree: DDTree,
    root_tokens: torch.Tensor,
    prefix_lens: torch.Tensor,
    *,
    prefix_lens_sum: Optional[int] = None,
    with_custom_mask: bool = True,
    fused: Optional[bool] = None,
) -> TreeVerifyInputs:
    """Verify inputs for a batch of trees (see ``TreeVerifyInputs``).

    On CUDA with triton (``fused`` None) or when ``fused`` is True, the tokens,
    positions and custom mask come from one kernel (``ddtree_triton.fused_verify_inputs``),
    equal to the pure-torch path's element for element; ``fused=False`` keeps the torch path."""
    R, N = tree.tokens.shape
    dev = tree.tokens.device
    anc = ancestor_mask(tree)
    ri, nt, ns = tree_verify_arrays(tree)
    tk = _triton_for(dev) if fused is None else (triton_kernels() if fused else None)
    if fused and tk is None:
        raise RuntimeError("build_verify_inputs(fused=True): ddtree_triton does not import here")
    if tk is not None and with_custom_mask:
        if prefix_lens_sum is None:
            prefix_lens_sum = int(prefix_lens.sum().item())
        tok, pos, cm = tk.fused_verify_inputs(
            tree.tokens, tree.depths, tree.valid, anc, root_tokens.to(dev),
            prefix_lens.to(dev), prefix_lens_sum,
        )
        return TreeVerifyInputs(draft_token=tok, positions=pos, retrive_index=ri, retrive_next_token=nt,
                                retrive_next_sibling=ns, custom_mask=cm, ancestor=anc)
    root = root_tokens.to(dev).long().view(R, 1)
    tok = torch.where(tree.valid, tree.tokens, root.expand(R, N)).clone()
    tok[:, 0] = root[:, 0]
    cm = flat_custom_mask(anc, prefix_lens, prefix_lens_sum) if with_custom_mask else None
    return TreeVerifyInputs(
        draft_token=tok.reshape(-1),
        positions=position_ids(tree, prefix_lens).reshape(-1),
        retrive_index=ri,
        retrive_next_token=nt,
        retrive_next_sibling=ns,
        custom_mask=cm,
        ancestor=anc,
    )


def fused_verify_check(device, budget: int, depth: int) -> Optional[str]:
    """Whether the one-kernel verify input may be used on ``device``: None when it equals the
    torch path's on a fixed set of trees of this budget and depth (three requests: prefixes of
    0, 5 and 17 tokens, the sum given exactly and as an upper bound), else why not (triton does
    not import, the kernel raised, or the fields that differ). The worker calls it once at
    start-up (it also compiles the kernel for the server's N) and keeps the torch path otherwise."""
    device = torch.device(device)
    if triton_kernels() is None:
        return "triton does not import"
    R, L, B = 3, max(1, int(depth)), max(1, int(budget))
    K = min(B, 8)
    # distinct ids per position, log-probabilities strictly descending per row, different per request
    steps = torch.arange(R * L * K, dtype=torch.float32).view(R, L, K)
    lp = -(torch.arange(K, dtype=torch.float32) + 1.0) * (0.5 + 0.1 * steps[..., :1] / (R * L * K)) - 0.01 * steps[..., :1]
    ids = (torch.arange(K).view(1, 1, K) * 7 + torch.arange(L).view(1, L, 1) * 3 + torch.arange(R).view(R, 1, 1)) % 1000
    try:
        tree = build_ddtree(ids.to(device), lp.to(device), B, method="torch")   # compiles only the verify kernel
        roots = torch.tensor([[11, 0], [12, 0], [13, 0]], device=device)[:, 0]
        pl = torch.tensor([0, 5, 17], device=device)
        for bound in (22, 25):
            want = build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=False)
            got = build_verify_inputs(tree, roots, pl, prefix_lens_sum=bound, fused=True)
            differ = [f for f in ("draft_token", "positions", "custom_mask")
                      if not torch.equal(getattr(want, f), getattr(got, f))]
            if differ:
                return "differs from the torch path: " + ", ".join(differ)
    except Exception as e:  # a kernel that does not compile or launch here
        return f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


# --------------------------------------------------------------------------
# Acceptance
# --------------------------------------------------------------------------


@dataclass
class AcceptResult:
    """accept_index [R, L+1] local node indices of the accepted path, root first,
    padded with -1; accept_len [R] = accepted drafts (path length - 1);
    last_node [R] = last accepted node (local index); bonus [R] = the target's
    token at the last accepted node (the next root)."""

    accept_index: torch.Tensor
    accept_len: torch.Tensor
    last_node: torch.Tensor
    bonus: torch.Tensor


def accept_greedy(tree: DDTree, target_predict: torch.Tensor) -> AcceptResult:
    """Walk the tree along the target's prediction at each node.

    target_predict: [R, N] int64, the target's token at every verify position
    (argmax for greedy; one independent sample per node for sampling, see
    ``accept_sampling``).  From the root, move to the child whose token equals
    the prediction at the current node while one exists (siblings carry distinct
    tokens, so it is unique).  max_depth vectorized steps, no host sync."""
    R, N = tree.tokens.shape
    dev = tree.tokens.device
    pred = target_predict.to(dev).long().view(R, N)
    L = tree.max_depth
    par = tree.parents
    has_par = par >= 0
    match = has_par & (tree.tokens == _gather(pred, par.clamp(min=0)))
    idx = torch.arange(N, device=dev).expand(R, N)
    mc = torch.full((R, N + 1), -1, dtype=torch.long, device=dev)
    mc.scatter_reduce_(1, torch.where(match, par, N), idx, reduce="amax", include_self=True)
    mc = mc[:, :N]
    acc = torch.full((R, L + 1), -1, dtype=torch.long, device=dev)
    acc[:, 0] = 0
    cur = torch.zeros((R, 1), dtype=torch.long, device=dev)
    alen = torch.zeros(R, dtype=torch.long, device=dev)
    for s in range(1, L + 1):
        nxt = _gather(mc, cur)
        ok = nxt >= 0
        acc[:, s : s + 1] = torch.where(ok, nxt, -1)
        alen += ok.squeeze(1).long()
        cur = torch.where(ok, nxt, cur)
    # a -1 stops the walk, so entries after the first -1 are -1 as well
    last = cur.squeeze(1)
    bonus = _gather(pred, cur).squeeze(1)
    return AcceptResult(accept_index=acc, accept_len=alen, last_node=last, bonus=bonus)


def sample_per_node(
    probs: torch.Tensor, generator: Optional[torch.Generator] = None
) -> torch.Tensor:
    """One independent draw per verify position. probs [R, N, V] -> [R, N] int64."""
    R, N, V = probs.shape
    u = torch.rand((R, N, 1), generator=generator, device=probs.device, dtype=probs.dtype)
    cdf = torch.cumsum(probs, dim=-1)
    cdf = cdf / cdf[..., -1:].clamp_min(torch.finfo(probs.dtype).tiny)
    t = torch.searchsorted(cdf, u).squeeze(-1)
    return t.clamp_(max=V - 1)


def accept_sampling(
    tree: DDTree, target_probs: torch.Tensor, generator: Optional[torch.Generator] = None
) -> AcceptResult:
    """Sampling acceptance (sample-and-walk): draw one token from the target's
    distribution at every node, then walk as in ``accept_greedy``.

    Lossless without draft probabilities: every emitted token is the target's
    own draw at a node whose logits condition on exactly the emitted prefix.
    target_probs: [R, N, V] after temperature / top-k / top-p."""
    return accept_greedy(tree, sample_per_node(target_probs, generator))


# --------------------------------------------------------------------------
# Commit maps
# --------------------------------------------------------------------------


@dataclass
class CommitMaps:
    """Index maps to commit an accepted path (all [R, ...], -1 padded).

    kv_keep_slots       [R, L+1] global verify slots (r*N + node) of the path, in order
    kv_keep_mask        [R, N]   True for kept slots
    kv_evict_mask       [R, N]   True for every other verify slot (padding included)
    hidden_gather_index [R, L+1] flat rows (r*N + node) of the verify hidden states
                                 for the next draft round, path order
    mamba_state_index   [R]      local index of the last accepted node (the
                                 intermediate SSM/conv state to commit); NOT accept_len
    mamba_track_index   [R, L+1] local node of the i-th committed verify token (path[i])
    committed_tokens    [R, L+1] tokens of path[1:] followed by the bonus
    num_committed       [R]      accept_len + 1 (= path length = len(committed_tokens))
    """

    kv_keep_slots: torch.Tensor
    kv_keep_mask: torch.Tensor
    kv_evict_mask: torch.Tensor
    hidden_gather_index: torch.Tensor
    mamba_state_index: torch.Tensor
    mamba_track_index: torch.Tensor
    committed_tokens: torch.Tensor
    num_committed: torch.Tensor


def commit_maps(tree: DDTree, acc: AcceptResult) -> CommitMaps:
    R, N = tree.tokens.shape
    dev = tree.tokens.device
    L1 = acc.accept_index.shape[1]
    path = acc.accept_index
    on = path >= 0
    base = (torch.arange(R, device=dev) * N).unsqueeze(1)
    slots = torch.where(on, path + base, -1)
    keep = torch.zeros((R, N + 1), dtype=torch.bool, device=dev)
    keep.scatter_(1, torch.where(on, path, N), True)
    keep = keep[:, :N]
    # tokens of path[1:], then the bonus at position accept_len
    nxt = torch.full((R, L1), -1, dtype=torch.long, device=dev)
    nxt[:, : L1 - 1] = path[:, 1:]
    tok = torch.where(nxt >= 0, _gather(tree.tokens, nxt.clamp(min=0)), -1)
    pos = torch.arange(L1, device=dev).expand(R, L1)
    tok = torch.where(pos == acc.accept_len.unsqueeze(1), acc.bonus.unsqueeze(1), tok)
    return CommitMaps(
        kv_keep_slots=slots,
        kv_keep_mask=keep,
        kv_evict_mask=~keep,
        hidden_gather_index=slots.clone(),
        mamba_state_index=acc.last_node.clone(),
        mamba_track_index=path.clone(),
        committed_tokens=tok,
        num_committed=acc.accept_len + 1,
    )


def ragged_hidden_gather_index(maps: CommitMaps) -> torch.Tensor:
    """Flat rows of the accepted nodes of all requests, request-major and path
    order, without padding (variable size: synchronises on GPU)."""
    idx = maps.hidden_gather_index
    return idx[idx >= 0]
