"""GPU check: the Gated DeltaNet chunk path (prefill/extend) that
float32-gdn-chunk.patch opens to float32, against the gated delta rule computed
token by token in float64 with torch (``reference``), next to the same call in
bfloat16.

The kernels are the patched tree's own, imported from it (``chunk_gated_delta_rule``,
sglang/srt/layers/attention/fla/chunk.py, with the qk l2norm in the kernel, varlen,
initial states taken from and written back to a state pool by index, as SGLang's
GDN backend calls it), with the e2e hybrid's head shapes.  Run it under the
environment of the run it vouches for (TRITON_F32_DEFAULT is read at import):

    TRITON_F32_DEFAULT=ieee PYTHONPATH=W/patched:W/deps:W/stubs python -m tools.gpu.gdn_float32_check --out DIR

(W: the --work folder of an e2e run.)  Writes DIR/gdn_float32_check.json: per
dtype the largest absolute error of the outputs and of the written states, and
that error relative to the reference's largest value.  Exit 0: float32 within
--tol (relative, 1e-4) of the reference and closer than bfloat16; 1 otherwise.

``reference`` is pure torch and tested on CPU (tests/gpu/test_gdn_float32_check.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import e2e_models as models


def reference(q, k, v, g, beta, scale, h0, cu_seqlens):
    """The gated delta rule, one token at a time, in float64.

    q, k: [1, T, Hk, K]; v: [1, T, Hv, V]; g (log decay), beta: [1, T, Hv];
    h0: [N, Hv, V, K] initial states of the N sequences of cu_seqlens.  For each
    value head h (key head h // (Hv // Hk)), with q and k l2-normalised:
    S <- S * exp(g_t); S <- S + beta_t * (v_t - S k_t) k_t^T; o_t = S (scale q_t).
    Returns (o [1, T, Hv, V], final states [N, Hv, V, K])."""
    import torch

    q, k, v, g, beta, h0 = (x.double() for x in (q, k, v, g, beta, h0))
    q = torch.nn.functional.normalize(q, dim=-1)
    k = torch.nn.functional.normalize(k, dim=-1)
    Hk, Hv = q.shape[2], v.shape[2]
    o = torch.zeros_like(v)
    finals = []
    for n in range(len(cu_seqlens) - 1):
        S = h0[n].clone()
        for t in range(int(cu_seqlens[n]), int(cu_seqlens[n + 1])):
            for h in range(Hv):
                kh = h // (Hv // Hk)
                S[h] = S[h] * torch.exp(g[0, t, h])
                S[h] = S[h] + beta[0, t, h] * torch.outer(v[0, t, h] - S[h] @ k[0, t, kh], k[0, t, kh])
                o[0, t, h] = S[h] @ (q[0, t, kh] * scale)
        finals.append(S)
    return o, torch.stack(finals)


def inputs(shapes, lengths, seed, device):
    """Seeded float32 inputs (gates in SGLang's ranges: g <= 0, beta in (0, 1)), a state pool of
    len(lengths) + 2 slots, the sequences' slots, cu_seqlens."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    T = sum(lengths)
    Hk, Hv, K, V = shapes["Hk"], shapes["Hv"], shapes["K"], shapes["V"]

    def r(*s):
        return torch.randn(*s, generator=gen)

    x = {"q": r(1, T, Hk, K), "k": r(1, T, Hk, K), "v": r(1, T, Hv, V),
         "g": -torch.rand(1, T, Hv, generator=gen) * 0.5, "beta": torch.rand(1, T, Hv, generator=gen),
         "pool": r(len(lengths) + 2, Hv, V, K) * 0.1}
    x = {name: t.to(device) for name, t in x.items()}
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    x["cu_seqlens"] = torch.tensor(cu, dtype=torch.int64, device=device)
    x["slots"] = torch.arange(1, len(lengths) + 1, dtype=torch.int64, device=device)
    return x


def run(shapes, lengths, seed, device="cuda") -> dict:
    import torch

    from sglang.srt.layers.attention.fla.chunk import chunk_gated_delta_rule

    x = inputs(shapes, lengths, seed, device)
    scale = shapes["K"] ** -0.5
    ref_o, ref_h = reference(x["q"].cpu(), x["k"].cpu(), x["v"].cpu(), x["g"].cpu(), x["beta"].cpu(), scale,
                             x["pool"].cpu()[x["slots"].cpu()], x["cu_seqlens"].cpu())
    out = {"triton_f32_default": os.environ.get("TRITON_F32_DEFAULT"), "lengths": lengths,
           "ref_max_abs_o": ref_o.abs().max().item(), "ref_max_abs_state": ref_h.abs().max().item()}
    for name, dt in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        pool = x["pool"].clone()
        o, _, _ = chunk_gated_delta_rule(q=x["q"].to(dt), k=x["k"].to(dt), v=x["v"].to(dt), g=x["g"],
                                      beta=x["beta"].to(dt), scale=scale, initial_state=pool,
                                      initial_state_indices=x["slots"], cu_seqlens=x["cu_seqlens"],
                                      head_first=False, use_qk_l2norm_in_kernel=True)
        torch.cuda.synchronize()
        err_o = (o.double().cpu() - ref_o).abs().max().item()
        err_h = (pool[x["slots"]].double().cpu() - ref_h).abs().max().item()
        out[name] = {"max_abs_err_o": err_o, "max_abs_err_state": err_h,
                     "rel_err": max(err_o / out["ref_max_abs_o"], err_h / out["ref_max_abs_state"])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lengths", default="1,15,64,100,257", help="the sequences' token counts (one varlen call)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="float32's largest error allowed, relative to the reference's largest value (outputs and "
                         "states each); unit roundoff: float32 6e-8, TF32 4.9e-4, bfloat16 3.9e-3")
    args = ap.parse_args(argv)
    t = models.HYBRID["text_config"]
    shapes = {"Hk": t["linear_num_key_heads"], "Hv": t["linear_num_value_heads"], "K": t["linear_key_head_dim"],
              "V": t["linear_value_head_dim"]}
    res = run(shapes, [int(n) for n in args.lengths.split(",")], args.seed)
    res["tol"] = args.tol
    res["pass"] = res["float32"]["rel_err"] <= args.tol and res["float32"]["rel_err"] < res["bfloat16"]["rel_err"]
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gdn_float32_check.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0 if res["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
