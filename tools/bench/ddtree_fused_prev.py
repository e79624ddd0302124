"""The PREVIOUS fused DDTree path, frozen for the comparison in
tools/bench/ddtree.py: a copy of ddtree_triton.py as of commit bc63c0a, before
the split-V scan / threshold select / one-reduction pop rewrite.  Not part of
the overlay; SGLang never imports it.  Its original description follows.


Three launches replace the pure-torch path's full-vocabulary top-K plus the
~40 small kernels per depth of the batched merge:

1. ``_scan_kernel`` (grid rows x splits): one pass over the logits (fp32 or
   bf16, read once).  Per chunk of CHUNK tokens it stores the chunk's best
   packed key, and per split an online (max, sum exp) for the log-sum-exp.
2. ``_select_kernel`` (one program per row): the log-sum-exp; the K best
   chunks; the K best tokens among those chunks' K*CHUNK tokens.  Exact: the K
   best chunks (by their best element) contain the K best elements.
3. ``_build_kernel`` (one program per request): the paper's heap procedure
   itself, pop by pop, with the heap held as a vector of 2B+1 slots (the
   first-child slot and the next-sibling slot of every node), then the
   ancestor mask and SGLang's LCRS arrays of the tree.

Orders.  A packed key is (order-preserving int32 of the fp32 value) << 32 |
(2^31 - 1 - index), so a larger key is a larger value, and among equal values
the smaller index: the top-K is that of a stable descending sort.  The
builder's pop order is (path score desc, rank tuple asc) with float64 scores
folded exactly as ``build_ddtree`` and the baseline fold them; rank tuples are
packed, rank+1 per depth, into three int64 words compared word by word.

Nothing here imports SGLang; the module needs torch and triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAXIDX = 2**31 - 1
# packed key of (-inf, MAXIDX): below every real element's key
_NEG_INF_BITS = -8388608  # int32 view of 0xFF800000
PAD_KEY = ((_NEG_INF_BITS ^ 0x7FFFFFFF) << 32) + 0
NWORDS = 3


@triton.jit
def _pack(x, idx, MAXIDX: tl.constexpr):
    b = x.to(tl.int32, bitcast=True)
    k32 = tl.where(b >= 0, b, b ^ 0x7FFFFFFF)
    return (k32.to(tl.int64) << 32) + (MAXIDX - idx.to(tl.int64))


@triton.jit
def _unpack(key, MAXIDX: tl.constexpr):
    hi = key >> 32
    low = key - (hi << 32)
    k32 = hi.to(tl.int32)
    b = tl.where(k32 >= 0, k32, k32 ^ 0x7FFFFFFF)
    return b.to(tl.float32, bitcast=True), MAXIDX - low


@triton.jit
def _scan_kernel(
    x_ptr, stride_row, V, NCH, ckey_ptr, m_ptr, s_ptr,
    CPS: tl.constexpr, SPLITS: tl.constexpr, CHUNK: tl.constexpr, TC: tl.constexpr, MAXIDX: tl.constexpr,
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
        mask = idx < V
        x = tl.load(x_ptr + row * stride_row + idx, mask=mask, other=float("-inf")).to(tl.float32)
        key = _pack(x, tl.where(mask, idx, MAXIDX), MAXIDX)
        ck = tl.max(key, axis=1)
        tl.store(ckey_ptr + row * NCH + chunk, ck, mask=chunk < NCH)
        mn = tl.maximum(m, tl.max(tl.max(x, axis=1), axis=0))
        ms = tl.where(mn == float("-inf"), 0.0, mn)
        s = s * tl.exp(m - ms) + tl.sum(tl.sum(tl.exp(x - ms), axis=1), axis=0)
        m = mn
    tl.store(m_ptr + row * SPLITS + sp, m)
    tl.store(s_ptr + row * SPLITS + sp, s)


@triton.jit
def _select_kernel(
    x_ptr, stride_row, V, NCH, K, pad_key, ckey_ptr, m_ptr, s_ptr, scr_ptr, ids_ptr, lp_ptr,
    SPLITS: tl.constexpr, NCH_P2: tl.constexpr, KP2: tl.constexpr, CHUNK: tl.constexpr,
    MAXIDX: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    so = tl.arange(0, SPLITS)
    ms = tl.load(m_ptr + row * SPLITS + so)
    ss = tl.load(s_ptr + row * SPLITS + so)
    M = tl.max(ms, 0)
    Ms = tl.where(M == float("-inf"), 0.0, M)
    lse = tl.log(tl.sum(ss * tl.exp(ms - Ms), 0)) + Ms
    # the K best chunks
    c = tl.arange(0, NCH_P2)
    ck = tl.load(ckey_ptr + row * NCH + c, mask=c < NCH, other=pad_key)
    ck = tl.sort(ck, descending=True)
    tl.store(scr_ptr + row * (2 * KP2) + c, ck, mask=c < K)
    tl.debug_barrier()
    kk = tl.arange(0, KP2)
    top = tl.load(scr_ptr + row * (2 * KP2) + kk, mask=(kk < K) & (kk < NCH_P2), other=pad_key)
    _, eidx = _unpack(top, MAXIDX)
    chunk = eidx // CHUNK
    cj = tl.arange(0, CHUNK)
    idx = chunk[:, None] * CHUNK + cj[None, :]
    mask = (kk[:, None] < K) & (kk[:, None] < NCH_P2) & (idx < V)
    x = tl.load(x_ptr + row * stride_row + idx, mask=mask, other=float("-inf")).to(tl.float32)
    key = _pack(x, tl.where(mask, idx, MAXIDX), MAXIDX)
    key = tl.sort(tl.reshape(key, [KP2 * CHUNK]), descending=True)
    e = tl.arange(0, KP2 * CHUNK)
    tl.store(scr_ptr + row * (2 * KP2) + KP2 + e, key, mask=e < K)
    tl.debug_barrier()
    best = tl.load(scr_ptr + row * (2 * KP2) + KP2 + kk, mask=kk < K, other=pad_key)
    val, tid = _unpack(best, MAXIDX)
    lp = tl.where(val == float("-inf"), float("-inf"), val - lse)
    tl.store(ids_ptr + row * K + kk, tid, mask=kk < K)
    tl.store(lp_ptr + row * K + kk, lp, mask=kk < K)


def fused_topk_logprobs(x: torch.Tensor, k: int):
    """x [rows, V] (fp32/bf16/fp16, last dim contiguous) -> ids int64 [rows, k],
    logprobs fp32 [rows, k], sorted by (value desc, index asc)."""
    rows, V = x.shape
    assert x.stride(1) == 1 and 1 <= k <= V and V < MAXIDX
    dev = x.device
    CHUNK = 64 if V >= 8192 else 16
    NCH = triton.cdiv(V, CHUNK)
    TC = min(32, triton.next_power_of_2(NCH))
    SPLITS = max(1, min(64, triton.next_power_of_2(triton.cdiv(2048, rows))))
    SPLITS = min(SPLITS, triton.next_power_of_2(triton.cdiv(NCH, TC)))
    CPS = triton.cdiv(triton.cdiv(NCH, SPLITS), TC) * TC
    KP2 = triton.next_power_of_2(k)
    ckey = torch.empty((rows, NCH), dtype=torch.int64, device=dev)
    m = torch.empty((rows, SPLITS), dtype=torch.float32, device=dev)
    s = torch.empty((rows, SPLITS), dtype=torch.float32, device=dev)
    scr = torch.empty((rows, 2 * KP2), dtype=torch.int64, device=dev)
    ids = torch.empty((rows, k), dtype=torch.int64, device=dev)
    lp = torch.empty((rows, k), dtype=torch.float32, device=dev)
    _scan_kernel[(rows, SPLITS)](
        x, x.stride(0), V, NCH, ckey, m, s,
        CPS=CPS, SPLITS=SPLITS, CHUNK=CHUNK, TC=TC, MAXIDX=MAXIDX, num_warps=4,
    )
    nw = 8 if KP2 * CHUNK >= 4096 else 4
    _select_kernel[(rows,)](
        x, x.stride(0), V, NCH, k, PAD_KEY, ckey, m, s, scr, ids, lp,
        SPLITS=SPLITS, NCH_P2=triton.next_power_of_2(NCH), KP2=KP2, CHUNK=CHUNK,
        MAXIDX=MAXIDX, num_warps=nw,
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
def _build_kernel(
    ids_ptr, lp_ptr, s_r, s_l, KC,
    tok_ptr, dep_ptr, par_ptr, rank_ptr, score_ptr, valid_ptr, nn_ptr, nt_ptr, ns_ptr, anc_ptr,
    L: tl.constexpr, B: tl.constexpr, N: tl.constexpr, NP2: tl.constexpr, S: tl.constexpr,
    BITS: tl.constexpr, PER: tl.constexpr, TI: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    NEG = float("-inf")
    sl = tl.arange(0, S)
    nd = tl.arange(0, NP2)
    # heap slots: slot i (0..B) = first child of node i, slot B+i = next sibling of node i
    lp00 = tl.load(lp_ptr + r * s_r).to(tl.float64)
    zf = tl.zeros([S], tl.float64)
    zi = tl.zeros([S], tl.int64)
    is0 = sl == 0
    active = is0
    score = tl.where(is0, zf + lp00, zf + NEG)
    pk = tl.where(is0, zi + (1 << 16), zi)  # parent << 24 | depth << 16 | rank
    pw = zf
    w0 = tl.where(is0, zi + (tl.full([], 1, tl.int64) << ((PER - 1) * BITS)), zi)
    w1 = zi
    w2 = zi
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
        sc = tl.where(active, score, NEG)
        best = tl.max(sc, 0)
        cand = active & (sc == best)
        big = tl.full([S], 9223372036854775807, tl.int64)
        m0 = tl.min(tl.where(cand, w0, big), 0)
        cand = cand & (w0 == m0)
        m1 = tl.min(tl.where(cand, w1, big), 0)
        cand = cand & (w1 == m1)
        m2 = tl.min(tl.where(cand, w2, big), 0)
        cand = cand & (w2 == m2)
        j = tl.min(tl.where(cand, sl, S), 0)
        has = j < S
        sel = sl == j
        pkj = tl.sum(tl.where(sel, pk, zi), 0)
        pwj = tl.sum(tl.where(sel, pw, zf), 0)
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
        active = active & ~sel
        # first child of n
        okc = has & (dep < L)
        lpc = tl.load(lp_ptr + r * s_r + dep * s_l, mask=okc, other=0.0).to(tl.float64)
        c0, c1, c2 = _word_add(m0, m1, m2, dep + 1, BITS, PER)
        hc = (sl == n) & okc
        active = active | hc
        score = tl.where(hc, best + lpc, score)
        pk = tl.where(hc, (n << 24) | ((dep + 1) << 16), pk)
        pw = tl.where(hc, best, pw)
        w0 = tl.where(hc, c0, w0)
        w1 = tl.where(hc, c1, w1)
        w2 = tl.where(hc, c2, w2)
        # next sibling of n
        oks = has & (rk + 1 < KC)
        lps = tl.load(lp_ptr + r * s_r + (dep - 1) * s_l + rk + 1, mask=oks, other=0.0).to(tl.float64)
        s0, s1, s2 = _word_add(m0, m1, m2, dep, BITS, PER)
        hs = (sl == B + n) & oks
        active = active | hs
        score = tl.where(hs, pwj + lps, score)
        pk = tl.where(hs, (par << 24) | (dep << 16) | (rk + 1), pk)
        pw = tl.where(hs, pwj, pw)
        w0 = tl.where(hs, s0, w0)
        w1 = tl.where(hs, s1, w1)
        w2 = tl.where(hs, s2, w2)
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
    tl.debug_barrier()
    # ancestor mask by pointer jumping over the stored parents
    cols = tl.arange(0, NP2)[None, :]
    for i0 in tl.static_range(0, NP2, TI):
        rows = i0 + tl.arange(0, TI)[:, None]
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
    TI = max(1, min(NP2, 4096 // NP2))
    _build_kernel[(R,)](
        ids, lp, L * K, K, kc,
        tokens, depths, parents, ranks, scores, valid, num_nodes, nt, ns, anc,
        L=L, B=B, N=N, NP2=NP2, S=S, BITS=BITS, PER=PER, TI=TI, num_warps=1 if S <= 256 else 4,
    )
    return dict(tokens=tokens, depths=depths, parents=parents, ranks=ranks, scores=scores,
                valid=valid, num_nodes=num_nodes, ancestor=anc, next_token=nt, next_sibling=ns)


def supports_build(L: int, K: int, budget: int) -> bool:
    kc = min(K, budget)
    bits = max(1, kc.bit_length())
    per = 63 // bits
    return 1 <= budget < 2**16 and L < 256 and (L + per - 1) // per <= NWORDS


def supports_topk(V: int, k: int) -> bool:
    return 1 <= k <= min(V, 256) and V < MAXIDX
