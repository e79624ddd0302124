"""Lossless speculation: a speculative server's greedy outputs against the
same tree's non-speculative reference, token for token, and the acceptance
length SGLang reports (pure; tests/gpu/test_e2e_lossless.py).

A mismatch is never loosened: it is reported with its request, position,
both tokens and the reference's own top-1 minus top-2 log-probability at that
position (`margin`, from a reference pass with `top_logprobs_num=2`), so a
near-tie flip (margin ~ 1e-6 in float32) can be told from a real bug."""
import random

N_PROMPTS = 32
MAX_NEW = 32


def prompts(n=N_PROMPTS, id_max=31000, seed=0):
    """n prompts of random token ids, lengths 1 to ~900, fixed by the seed."""
    rng = random.Random(seed)
    lengths = [1, 2, 7, 31, 64, 129, 511, 900] + [rng.randint(3, 700) for _ in range(n - 8)]
    return [[rng.randrange(100, id_max) for _ in range(k)] for k in lengths[:n]]


def margins(meta_infos):
    """Per request, per output position: top-1 minus top-2 log-probability,
    from /generate's meta_info `output_top_logprobs` ([(logprob, id, text), ...])."""
    out = []
    for m in meta_infos:
        row = []
        for top in m.get("output_top_logprobs") or []:
            lp = sorted((t[0] for t in (top or []) if t and t[0] is not None), reverse=True)
            row.append(lp[0] - lp[1] if len(lp) >= 2 else None)
        out.append(row)
    return out


def compare(reference, candidate, ref_margins=None, noise=None):
    """Token-for-token equality of two lists of output id lists:
    {"equal": bool, "lossless": bool, "n": requests, "tokens": compared, "mismatches": [...]}.
    ``noise``: the largest reference margin at which the same server's own non-speculative
    outputs diverge between single and batched sends (reference_noise): a first divergence at
    a margin within it is marked ``within_noise`` (the engine's own rounding decides such a
    position either way, and the continuation after it is not comparable); any other
    mismatch, or one without a margin, makes ``lossless`` False."""
    mism = []
    tokens = 0
    if len(reference) != len(candidate):
        return {"equal": False, "n": len(reference), "tokens": 0,
                "mismatches": [{"request": None, "why": f"{len(candidate)} outputs for {len(reference)} requests"}]}
    for i, (r, c) in enumerate(zip(reference, candidate)):
        r, c = list(r or []), list(c or [])
        tokens += min(len(r), len(c))
        pos = next((p for p, (a, b) in enumerate(zip(r, c)) if a != b), None)
        if pos is None and len(r) != len(c):
            pos = min(len(r), len(c))
        if pos is not None:
            m = None
            if ref_margins and i < len(ref_margins) and pos < len(ref_margins[i]):
                m = ref_margins[i][pos]
            mism.append({"request": i, "position": pos, "reference": r[pos] if pos < len(r) else None,
                         "got": c[pos] if pos < len(c) else None, "margin": m,
                         "lengths": [len(r), len(c)],
                         "within_noise": noise is not None and m is not None and m <= noise})
    return {"equal": not mism, "lossless": all(x.get("within_noise") for x in mism),
            "n": len(reference), "tokens": tokens, "mismatches": mism}


def reference_noise(reference_single, reference_batch, ref_margins):
    """The largest top-1 minus top-2 margin at which a non-speculative server's own batched
    outputs first diverge from its single ones (0.0 when they never do): how far that
    engine's numerics decide near-ties by batch shape alone."""
    c = compare(reference_single, reference_batch, ref_margins)
    ms = [x["margin"] for x in c["mismatches"] if x.get("margin") is not None]
    if len(ms) != len(c["mismatches"]):
        return None      # a divergence without a margin explains nothing
    return max(ms, default=0.0)


def acceptance(meta_infos):
    """SGLang's own per-request figures summed: completion tokens per verify
    step (meta_info `spec_verify_ct`); None when the server reports none."""
    ct = [m.get("spec_verify_ct") for m in meta_infos]
    if not any(ct):
        return None
    toks = sum(m.get("completion_tokens", 0) for m, v in zip(meta_infos, ct) if v)
    steps = sum(v for v in ct if v)
    correct = sum(m.get("spec_num_correct_drafts", 0) for m in meta_infos)
    return {"verify_steps": steps, "completion_tokens": toks, "accept_length": round(toks / steps, 4),
            "correct_drafts": correct, "requests": sum(1 for v in ct if v)}


def min_margin(ref_margins):
    vals = [m for row in ref_margins or [] for m in row if m is not None]
    return min(vals) if vals else None
