"""Triton kernels of the DDTree step (imported lazily by ddtree_tree on CUDA).

Four launches replace the pure-torch path's full-vocabulary top-K plus the
~40 small kernels per depth of the batched merge:

1. ``_scan_kernel`` (grid rows x splits, split-V): the only pass over the
   logits (fp32/bf16/fp16, read once).  Each program takes a slice of the
   vocabulary and stores, per chunk of CHUNK tokens, the chunk's largest value
   (a float max, no per-element key), and for its slice an online
   (max, sum exp) for the log-sum-exp.  Enough programs (about 4096) to keep
   the memory system busy at any batch.
2. ``_select_kernel`` (one program per row), threshold selection, no sort:
   the log-sum-exp from the partials; the threshold T of the K-th best chunk
   (bisection on order-preserving int32 keys, stopped as soon as at most KP2
   chunks reach it); those chunks' tokens; the K-th best token's threshold
   the same way (it starts at T, a proven lower bound, so it usually needs no
   step); the at most 2*KP2 survivors are ranked by counting (all pairs).
   Exact: the K best chunks (ordered by (max value desc, chunk index asc))
   contain the K best tokens (ordered by (value desc, token index asc)).
3. ``_build_kernel`` (one program per request): the paper's heap procedure,
   pop by pop, with the heap as a vector of 2B+1 slots (the first-child slot
   and the next-sibling slot of every node).  One pop is one tuple reduction
   (active, score, rank-tuple words, payload); the log-probs a popped entry
   needs are loaded when the entry is pushed (one pop ahead), so no global
   load sits between two pops.
4. ``_ancestor_kernel`` (grid requests x row tiles): the [N, N] ancestor mask
   by pointer jumping over the stored parents.

And one launch for a step's verify input (``fused_verify_inputs``, after the
tree): ``_verify_kernel`` writes the verify tokens, their positions and the
flat custom mask's tree columns (the ancestor mask; the mask is allocated
True), which the pure-torch ``build_verify_inputs`` assembles from about 20
small operations.

Orders.  A value's key is its order-preserving int32 (-0.0 counts as +0.0);
among equal values the smaller token index comes first, so the top-K is that
of a stable descending sort (torch.topk leaves ties unspecified).  The
builder's pop order is (path score desc, rank tuple asc) with float64 scores
folded exactly as ``build_ddtree`` and the baseline fold them; rank tuples
are packed, rank+1 per depth, into three int64 words compared word by word.

Nothing here imports SGLang; the module needs torch and triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAXIDX = 2**31 - 1
KEY_PAD = -(2**31)  # int32 key below every real value's key (-inf's is -2139095041)
NWORDS = 3
SCAN_PROGRAMS = 4096  # split-V target: rows x splits


@triton.jit
def _okey(x):
    """Order-preserving int32 key of fp32 x: x > y iff key(x) > key(y)."""
    b = tl.where(x == 0.0, 0.0, x).to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF)


@triton.jit
def _unkey(k):
    return tl.where(k >= 0, k, k ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _threshold(keys, need, cap):
    """(T, count(keys >= T)) with count(keys >= T) >= need and either
    count <= cap or T the need-th largest key (ties at T).  Bisection over the
    int32 key range, stopped as soon as at most ``cap`` keys reach T.  Keys of
    KEY_PAD are padding and never reach T."""
    real = keys > -2147483648
    lo = tl.min(tl.where(real, keys, 2147483647), 0)
    hi = tl.max(keys, 0)
    cnt = tl.sum(real.to(tl.int32), 0)
    while (lo < hi) & (cnt > cap):
        mid = (lo >> 1) + (hi >> 1) + ((lo | hi) & 1)  # ceil((lo + hi) / 2), no overflow
        c = tl.sum((keys >= mid).to(tl.int32), 0)
        ok = c >= need
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
        cnt = tl.where(ok, c, cnt)
    return lo, cnt


@triton.jit
def _take(keys, t, cnt, need, cap):
    """Mask of the kept keys: all >= t when count <= cap, else those > t and
    the first (need - count(> t)) equal to t in index order (exactly need)."""
    gt = keys > t
    eq = keys == t
    c_gt = tl.sum(gt.to(tl.int32), 0)
    take_eq = tl.where(cnt <= cap, cnt - c_gt, need - c_gt)
    return gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= take_eq))


@triton.jit
def _scan_kernel(
    x_ptr, stride_row, V, NCH, cmax_ptr, m_ptr, s_ptr,
    CPS: tl.constexpr, SPLITS: tl.constexpr, CHUNK: tl.constexpr, TC: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    ci = tl.arange(0, TC)
    cj = tl.arange(0, CHUNK)
    m = tl.max(tl.full([TC], float("-inf"), tl.float32), 0)
    s = tl.sum(tl.zeros([TC], tl.float32), 0)
    for t in range(0, CPS, TC):
        chunk = sp * CPS + t + ci
        idx = chunk[:, None] * CHUNK + cj[None, :]
        x = tl.load(x_ptr + row * stride_row + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
        cm = tl.max(x, axis=1)
        tl.store(cmax_ptr + row * NCH + chunk, cm, mask=chunk < NCH)
        mn = tl.maximum(m, tl.max(cm, axis=0))
        ms = tl.where(mn == float("-inf"), 0.0, mn)
        s = s * tl.exp(m - ms) + tl.sum(tl.sum(tl.exp(x - ms), axis=1), axis=0)
        m = mn
    tl.store(m_ptr + row * SPLITS + sp, m)
    tl.store(s_ptr + row * SPLITS + sp, s)


@triton.jit
def _select_kernel(
    x_ptr, stride_row, V, NCH, K, cmax_ptr, m_ptr, s_ptr, chk_ptr, ck_ptr, ci_ptr, ids_ptr, lp_ptr,
    SPLITS: tl.constexpr, NCH_P2: tl.constexpr, KP2: tl.constexpr, CHUNK: tl.constexpr,
    CAPE: tl.constexpr, JB: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    K = tl.zeros([], tl.int32) + K  # tensors even where triton specialises a 1
    NCH = tl.zeros([], tl.int32) + NCH
    so = tl.arange(0, SPLITS)
    ms = tl.load(m_ptr + row * SPLITS + so)
    ss = tl.load(s_ptr + row * SPLITS + so)
    M = tl.max(ms, 0)
    Ms = tl.where(M == float("-inf"), 0.0, M)
    lse = tl.log(tl.sum(ss * tl.exp(ms - Ms), 0)) + Ms
    # 1. the chunks: the KC best (a superset of at most KP2 when no tie forces exactness)
    KC = tl.minimum(K, NCH)
    c = tl.arange(0, NCH_P2)
    cm = tl.load(cmax_ptr + row * NCH + c, mask=c < NCH, other=0.0)
    ck = tl.where(c < NCH, _okey(cm), -2147483648)
    tc, ccnt = _threshold(ck, KC, KP2)
    csel = _take(ck, tc, ccnt, KC, KP2)
    cpos = tl.cumsum(csel.to(tl.int32), 0) - 1
    tl.store(chk_ptr + row * KP2 + cpos, c, mask=csel)  # ascending chunk order
    nsel = tl.sum(csel.to(tl.int32), 0)
    tl.debug_barrier()
    # 2. their tokens, in ascending token order; the K best of them
    e = tl.arange(0, KP2 * CHUNK)
    slot = e // CHUNK
    chunk = tl.load(chk_ptr + row * KP2 + slot, mask=slot < nsel, other=0)
    idx = chunk * CHUNK + e % CHUNK
    ok = (slot < nsel) & (idx < V)
    x = tl.load(x_ptr + row * stride_row + idx, mask=ok, other=0.0).to(tl.float32)
    ek = tl.where(ok, _okey(x), -2147483648)
    # with KC == K chunks kept, tc is a lower bound of the K-th token's key:
    # the kept chunks' maxima are KC tokens >= tc
    ek = tl.where(ek >= tc, ek, tl.where(KC == K, -2147483648, ek))
    te, ecnt = _threshold(ek, K, CAPE)
    esel = _take(ek, te, ecnt, K, CAPE)
    epos = tl.cumsum(esel.to(tl.int32), 0) - 1
    tl.store(ck_ptr + row * CAPE + epos, ek, mask=esel)
    tl.store(ci_ptr + row * CAPE + epos, idx, mask=esel)
    ne = tl.sum(esel.to(tl.int32), 0)
    tl.debug_barrier()
    # 3. rank the ne <= CAPE survivors by counting: (key desc, index asc)
    a = tl.arange(0, CAPE)
    ak = tl.load(ck_ptr + row * CAPE + a, mask=a < ne, other=-2147483648)
    ai = tl.load(ci_ptr + row * CAPE + a, mask=a < ne, other=2147483647)
    rank = tl.zeros([CAPE], tl.int32)
    for j0 in range(0, ne, JB):
        b = j0 + tl.arange(0, JB)
        bk = tl.load(ck_ptr + row * CAPE + b, mask=b < ne, other=-2147483648)
        bi = tl.load(ci_ptr + row * CAPE + b, mask=b < ne, other=2147483647)
        before = (bk[None, :] > ak[:, None]) | ((bk[None, :] == ak[:, None]) & (bi[None, :] < ai[:, None]))
        rank += tl.sum((before & (b[None, :] < ne)).to(tl.int32), axis=1)
    val = _unkey(ak)
    lp = tl.where(val == float("-inf"), float("-inf"), val - lse)
    out = (a < ne) & (rank < K)
    tl.store(ids_ptr + row * K + rank, ai.to(tl.int64), mask=out)
    tl.store(lp_ptr + row * K + rank, lp, mask=out)


def fused_topk_logprobs(x: torch.Tensor, k: int):
    """x [rows, V] (fp32/bf16/fp16, last dim contiguous) -> ids int64 [rows, k],
    logprobs fp32 [rows, k], sorted by (value desc, index asc)."""
    rows, V = x.shape
    assert x.stride(1) == 1 and 1 <= k <= V and V < MAXIDX
    dev = x.device
    CHUNK = 64 if V >= 8192 else 16
    NCH = triton.cdiv(V, CHUNK)
    TC = min(32, triton.next_power_of_2(NCH))
    SPLITS = max(1, min(64, triton.next_power_of_2(triton.cdiv(SCAN_PROGRAMS, rows))))
    SPLITS = min(SPLITS, triton.next_power_of_2(triton.cdiv(NCH, TC)))
    CPS = triton.cdiv(triton.cdiv(NCH, SPLITS), TC) * TC
    KP2 = triton.next_power_of_2(k)
    CAPE = 2 * KP2
    cmax = torch.empty((rows, NCH), dtype=torch.float32, device=dev)
    m = torch.empty((rows, SPLITS), dtype=torch.float32, device=dev)
    s = torch.empty((rows, SPLITS), dtype=torch.float32, device=dev)
    chk = torch.empty((rows, KP2), dtype=torch.int32, device=dev)
    ck = torch.empty((rows, CAPE), dtype=torch.int32, device=dev)
    ci = torch.empty((rows, CAPE), dtype=torch.int32, device=dev)
    ids = torch.empty((rows, k), dtype=torch.int64, device=dev)
    lp = torch.empty((rows, k), dtype=torch.float32, device=dev)
    _scan_kernel[(rows, SPLITS)](
        x, x.stride(0), V, NCH, cmax, m, s,
        CPS=CPS, SPLITS=SPLITS, CHUNK=CHUNK, TC=TC, num_warps=4,
    )
    NCH_P2 = triton.next_power_of_2(NCH)
    n = max(NCH_P2, KP2 * CHUNK)  # elements per program: 8 to 32 per thread
    nw = 4 if n < 4096 else 8 if n < 16384 else 16
    _select_kernel[(rows,)](
        x, x.stride(0), V, NCH, k, cmax, m, s, chk, ck, ci, ids, lp,
        SPLITS=SPLITS, NCH_P2=NCH_P2, KP2=KP2, CHUNK=CHUNK, CAPE=CAPE,
        JB=min(32, CAPE), num_warps=nw,
    )
    return ids, lp


# --------------------------------------------------------------------------
# Tree build
# --------------------------------------------------------------------------


@triton.jit
def _word_add(w0, w1, w2, d, BITS: tl.constexpr, PER: tl.constexpr):
    """Add 1 to the rank field of 1-based depth d in the packed rank tuple."""
    j = d - 1
    wi = j // PER
    inc = tl.full([], 1, tl.int64) << ((PER - 1 - j % PER) * BITS).to(tl.int64)
    zero = tl.zeros_like(inc)
    return (w0 + tl.where(wi == 0, inc, zero), w1 + tl.where(wi == 1, inc, zero),
            w2 + tl.where(wi == 2, inc, zero))


@triton.jit
def _pop_combine(a_act, a_sc, a0, a1, a2, a_pk, a_pw, a_cl, a_sl, a_j,
                 b_act, b_sc, b0, b1, b2, b_pk, b_pw, b_cl, b_sl, b_j):
    """The heap entry popped first of two: active first, then score desc,
    then rank tuple asc (slot asc among inactive ones, to be a total order)."""
    t2 = (a2 < b2) | ((a2 == b2) & (a_j <= b_j))
    t1 = (a1 < b1) | ((a1 == b1) & t2)
    t0 = (a0 < b0) | ((a0 == b0) & t1)
    ts = (a_sc > b_sc) | ((a_sc == b_sc) & t0)
    f = (a_act > b_act) | ((a_act == b_act) & ts)
    return (tl.where(f, a_act, b_act), tl.where(f, a_sc, b_sc), tl.where(f, a0, b0),
            tl.where(f, a1, b1), tl.where(f, a2, b2), tl.where(f, a_pk, b_pk),
            tl.where(f, a_pw, b_pw), tl.where(f, a_cl, b_cl), tl.where(f, a_sl, b_sl),
            tl.where(f, a_j, b_j))


@triton.jit
def _build_kernel(
    ids_ptr, lp_ptr, s_r, s_l, KC,
    tok_ptr, dep_ptr, par_ptr, rank_ptr, score_ptr, valid_ptr, nn_ptr, nt_ptr, ns_ptr,
    L: tl.constexpr, B: tl.constexpr, N: tl.constexpr, NP2: tl.constexpr, S: tl.constexpr,
    BITS: tl.constexpr, PER: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    KC = tl.zeros([], tl.int64) + KC  # a tensor even where triton specialises KC == 1
    NEG = float("-inf")
    sl = tl.arange(0, S)
    nd = tl.arange(0, NP2)
    base = lp_ptr + r * s_r
    # heap slots: slot i (0..B) = first child of node i, slot B+i = next sibling of node i.
    # Per slot: active, score, rank-tuple words w0..w2, pk = parent << 24 | depth << 16 | rank,
    # pw = the parent's score, cl = log-prob of the entry's first child (lp[depth][0]),
    # sb = log-prob of its next sibling (lp[depth-1][rank+1]).
    zf = tl.zeros([S], tl.float64)
    zi = tl.zeros([S], tl.int64)
    z32 = tl.zeros([S], tl.float32)
    is0 = sl == 0
    act = is0.to(tl.int32)
    score = tl.where(is0, zf + tl.load(base).to(tl.float64), zf + NEG)
    pk = tl.where(is0, zi + (1 << 16), zi)
    pw = zf
    w0 = tl.where(is0, zi + (tl.full([], 1, tl.int64) << ((PER - 1) * BITS)), zi)
    w1 = zi
    w2 = zi
    cl = tl.where(is0, z32 + tl.load(base + s_l, mask=(KC * 0 + L) > 1, other=0.0), z32)
    sb = tl.where(is0, z32 + tl.load(base + 1, mask=KC > 1, other=0.0), z32)
    # entries pushed by the previous pop: their log-probs arrive during this pop
    pc_slot = tl.full([], -1, tl.int64)
    pc_cl = tl.zeros([], tl.float32)
    pc_sb = tl.zeros([], tl.float32)
    ps_slot = tl.full([], -1, tl.int64)
    ps_sb = tl.zeros([], tl.float32)
    # nodes (0 = root)
    zn = tl.zeros([NP2], tl.int64)
    n_par = zn - 1
    n_dep = zn
    n_rank = zn - 1
    n_score = tl.where(nd == 0, tl.zeros([NP2], tl.float64), tl.zeros([NP2], tl.float64) + NEG)
    nt = zn - 1
    ns = zn - 1
    cnt = tl.sum(zn, 0)
    for step in range(B):
        wa, best, m0, m1, m2, pkj, pwj, wcl, wsb, j = tl.reduce(
            (act, score, w0, w1, w2, pk, pw, cl, sb, sl.to(tl.int64)), 0, _pop_combine)
        wcl = tl.where(j == pc_slot, pc_cl, wcl)
        wsb = tl.where(j == pc_slot, pc_sb, tl.where(j == ps_slot, ps_sb, wsb))
        cl = tl.where(sl == pc_slot, pc_cl, cl)
        sb = tl.where(sl == pc_slot, pc_sb, tl.where(sl == ps_slot, ps_sb, sb))
        has = wa > 0
        par = pkj >> 24
        dep = (pkj >> 16) & 255
        rk = pkj & 65535
        n = tl.full([], 1, tl.int64) + step
        isn = (nd == n) & has
        n_par = tl.where(isn, par, n_par)
        n_dep = tl.where(isn, dep, n_dep)
        n_rank = tl.where(isn, rk, n_rank)
        n_score = tl.where(isn, best, n_score)
        nt = tl.where((nd == par) & (j <= B) & has, n, nt)
        ns = tl.where((nd == j - B) & (j > B) & has, n, ns)
        cnt += has.to(tl.int64)
        act = tl.where(sl == j, 0, act)
        # first child of n: depth dep+1, rank 0
        okc = has & (dep < L)
        c0, c1, c2 = _word_add(m0, m1, m2, dep + 1, BITS, PER)
        hc = (sl == n) & okc
        act = tl.where(hc, 1, act)
        score = tl.where(hc, best + wcl.to(tl.float64), score)
        pk = tl.where(hc, (n << 24) | ((dep + 1) << 16), pk)
        pw = tl.where(hc, best, pw)
        w0 = tl.where(hc, c0, w0)
        w1 = tl.where(hc, c1, w1)
        w2 = tl.where(hc, c2, w2)
        pc_slot = tl.where(okc, n, -1)
        pc_cl = tl.load(base + (dep + 1) * s_l, mask=okc & (dep + 1 < L), other=0.0)
        pc_sb = tl.load(base + dep * s_l + 1, mask=okc & (KC > 1), other=0.0)
        # next sibling of n: depth dep, rank rk+1
        oks = has & (rk + 1 < KC)
        s0, s1, s2 = _word_add(m0, m1, m2, dep, BITS, PER)
        hs = (sl == B + n) & oks
        act = tl.where(hs, 1, act)
        score = tl.where(hs, pwj + wsb.to(tl.float64), score)
        pk = tl.where(hs, (par << 24) | (dep << 16) | (rk + 1), pk)
        pw = tl.where(hs, pwj, pw)
        w0 = tl.where(hs, s0, w0)
        w1 = tl.where(hs, s1, w1)
        w2 = tl.where(hs, s2, w2)
        cl = tl.where(hs, wcl, cl)
        ps_slot = tl.where(oks, B + n, -1)
        ps_sb = tl.load(base + (dep - 1) * s_l + rk + 2, mask=oks & (rk + 2 < KC), other=0.0)
    real = (nd >= 1) & (nd <= cnt)
    out = r * N + nd
    on = nd < N
    tok = tl.load(ids_ptr + r * s_r + (n_dep - 1) * s_l + n_rank, mask=real & on, other=0)
    tl.store(tok_ptr + out, tok, mask=on)
    tl.store(dep_ptr + out, n_dep, mask=on)
    tl.store(par_ptr + out, n_par, mask=on)
    tl.store(rank_ptr + out, n_rank, mask=on)
    tl.store(score_ptr + out, n_score, mask=on)
    tl.store(valid_ptr + out, (nd <= cnt).to(tl.int8), mask=on)
    tl.store(nt_ptr + out, nt, mask=on)
    tl.store(ns_ptr + out, ns, mask=on)
    tl.store(nn_ptr + r, cnt)


@triton.jit
def _ancestor_kernel(par_ptr, anc_ptr, L: tl.constexpr, N: tl.constexpr, NP2: tl.constexpr, TI: tl.constexpr):
    """Rows [tile*TI, tile*TI+TI) of one request's ancestor mask (self or ancestor)."""
    r = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * TI + tl.arange(0, TI)[:, None]
    cols = tl.arange(0, NP2)[None, :]
    a = rows.to(tl.int64)
    hit = cols == rows
    for _ in range(L):
        a = tl.load(par_ptr + r * N + a, mask=(a >= 0) & (a < N), other=-1)
        hit = hit | (cols == a)
    tl.store(anc_ptr + r * N * N + rows * N + cols, hit.to(tl.int8), mask=(rows < N) & (cols < N))


def fused_build(ids: torch.Tensor, lp: torch.Tensor, budget: int):
    """ids int [R, L, K], lp fp32 [R, L, K] (rows sorted desc) -> dict of the
    DDTree fields plus 'ancestor' [R, N, N] bool, 'next_token', 'next_sibling'."""
    R, L, K = ids.shape
    B = int(budget)
    N = B + 1
    kc = min(K, B)
    BITS = max(1, kc.bit_length())  # holds rank + 1 <= kc
    PER = 63 // BITS
    assert supports_build(L, K, B)
    dev = ids.device
    ids = ids.contiguous()
    lp = lp.contiguous()
    NP2 = triton.next_power_of_2(N)
    S = triton.next_power_of_2(2 * B + 1)
    tokens = torch.empty((R, N), dtype=torch.int64, device=dev)
    depths = torch.empty_like(tokens)
    parents = torch.empty_like(tokens)
    ranks = torch.empty_like(tokens)
    scores = torch.empty((R, N), dtype=torch.float64, device=dev)
    valid = torch.empty((R, N), dtype=torch.bool, device=dev)
    num_nodes = torch.empty((R,), dtype=torch.int64, device=dev)
    nt = torch.empty_like(tokens)
    ns = torch.empty_like(tokens)
    anc = torch.empty((R, N, N), dtype=torch.bool, device=dev)
    _build_kernel[(R,)](
        ids, lp, L * K, K, kc,
        tokens, depths, parents, ranks, scores, valid, num_nodes, nt, ns,
        L=L, B=B, N=N, NP2=NP2, S=S, BITS=BITS, PER=PER, num_warps=1 if S <= 256 else 4,
    )
    TI = max(1, min(NP2, 2048 // NP2))
    _ancestor_kernel[(R, triton.cdiv(N, TI))](parents, anc, L=L, N=N, NP2=NP2, TI=TI, num_warps=4)
    return dict(tokens=tokens, depths=depths, parents=parents, ranks=ranks, scores=scores,
                valid=valid, num_nodes=num_nodes, ancestor=anc, next_token=nt, next_sibling=ns)


@triton.jit
def _verify_kernel(tok_ptr, dep_ptr, valid_ptr, anc_ptr, root_ptr, root_stride, pl_ptr,
                   draft_ptr, pos_ptr, mask_ptr,
                   N: tl.constexpr, NP2: tl.constexpr, TI: tl.constexpr, RB: tl.constexpr):
    """Rows [tile*TI, tile*TI+TI) of request r's verify input (``fused_verify_inputs``)."""
    r = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * TI + tl.arange(0, TI)
    on = rows < N
    # the request's mask block starts after the earlier blocks, (prefix + N) * N each (RB >= R:
    # one load, no loop; a loop with a run-time bound does not run in triton 3.6's interpreter)
    ar = tl.arange(0, RB)
    earlier = tl.load(pl_ptr + ar, mask=ar < r, other=0).to(tl.int64)
    pl = tl.load(pl_ptr + r).to(tl.int64)
    row_len = pl + N
    start = (tl.sum(earlier, axis=0) + r * N) * N
    # tokens: the root at node 0 and at padding nodes, the node's token elsewhere; positions
    root = tl.load(root_ptr + r * root_stride).to(tl.int64)
    t = tl.load(tok_ptr + r * N + rows, mask=on, other=0)
    v = tl.load(valid_ptr + r * N + rows, mask=on, other=0)
    tl.store(draft_ptr + r * N + rows, tl.where((v != 0) & (rows > 0), t, root), mask=on)
    tl.store(pos_ptr + r * N + rows, pl + tl.load(dep_ptr + r * N + rows, mask=on, other=0), mask=on)
    # the mask row's tree columns: the node's ancestors, itself included (prefix columns: all True)
    row_start = start + rows[:, None].to(tl.int64) * row_len
    cols = tl.arange(0, NP2)[None, :]
    inside = on[:, None] & (cols < N)
    a = tl.load(anc_ptr + r * N * N + rows[:, None] * N + cols, mask=inside, other=0)
    tl.store(mask_ptr + row_start + pl + cols, a, mask=inside)


def fused_verify_inputs(tokens, depths, valid, ancestor, root_tokens, prefix_lens, prefix_lens_sum: int):
    """One launch: (draft_token [R*N] int64, positions [R*N] int64, custom_mask flat bool) of
    ``build_verify_inputs`` for a tree's fields (each [R, N], ancestor [R, N, N]), the roots [R]
    (any stride) and the committed prefix lengths [R]; ``prefix_lens_sum`` (their sum, from the
    host, or an upper bound of it: the tail past the last block stays True, as the torch path's)
    sizes the mask: prefix_lens_sum * N + R * N * N."""
    R, N = tokens.shape
    dev = tokens.device
    draft = torch.empty((R * N,), dtype=torch.int64, device=dev)
    pos = torch.empty_like(draft)
    mask = torch.ones((int(prefix_lens_sum) * N + R * N * N,), dtype=torch.bool, device=dev)
    NP2 = triton.next_power_of_2(N)
    TI = max(1, min(NP2, 2048 // NP2))
    _verify_kernel[(R, triton.cdiv(N, TI))](
        tokens.contiguous(), depths.contiguous(), valid.contiguous(), ancestor.contiguous(),
        root_tokens, root_tokens.stride(0), prefix_lens.contiguous(),
        draft, pos, mask, N=N, NP2=NP2, TI=TI, RB=max(128, triton.next_power_of_2(R)), num_warps=4,
    )
    return draft, pos, mask


def supports_build(L: int, K: int, budget: int) -> bool:
    kc = min(K, budget)
    bits = max(1, kc.bit_length())
    per = 63 // bits
    return 1 <= budget < 2**16 and L < 256 and (L + per - 1) // per <= NWORDS


def supports_topk(V: int, k: int) -> bool:
    return 1 <= k <= min(V, 256) and V < MAXIDX
