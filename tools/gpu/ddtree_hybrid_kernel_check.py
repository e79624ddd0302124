"""GPU check: SGLang's own Triton kernels of the hybrid linear-attention tree
verify, fed with DDTree's arrays, against chain runs of each node's ancestor path.

The kernels are the pin's (taken from the patched tree; they import only torch
and triton), run on the device with its triton:

* ``causal_conv1d_update`` (mamba/causal_conv1d_triton.py) in tree mode: it
  derives ``retrieve_parent_token`` from retrieve_next_token /
  retrieve_next_sibling, convolves each node with its ancestors, and writes one
  intermediate conv window per node;
* ``fused_sigmoid_gating_delta_rule_update`` (fla/fused_sigmoid_gating_recurrent.py),
  the GDN target-verify kernel, with ``retrieve_parent_token``: one
  intermediate SSM state per node, each started from its parent's;
* ``selective_state_update`` (mamba/ops/mamba_ssm.py), the Mamba2 target-verify
  kernel, with ``retrieve_parent_token`` (when mamba_ssm.py is in DIR);
* ``fused_mamba_state_scatter_with_mask`` (mamba/mamba_state_scatter_triton.py):
  the commit of the last accepted node's state into the request's slot.

For every real node, the tree kernels' output, intermediate conv window and
intermediate SSM state must equal those of a chain call (the same kernel, no
tree arrays) over the node's root-to-node path.

    python -m tools.gpu.ddtree_hybrid_kernel_check --kernels DIR --out result.json

DIR holds causal_conv1d_triton.py, fused_sigmoid_gating_recurrent.py,
mamba_state_scatter_triton.py and ddtree_tree.py copied from a patched tree.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .pathload import load


def _path(parents, k):
    """Local node indices root..k (parents[0] = -1)."""
    if k == 0:
        return [0]
    out = [k]
    while parents[out[-1]] > 0:
        out.append(parents[out[-1]])
    out.append(0)
    return out[::-1]


def _tree_nodes(parents, valid, bs, N):
    """(row, node, the node's path from the root) of every valid node of the bs rows of N nodes."""
    for b in range(bs):
        for k in range(N):
            if valid[b][k]:
                yield b, k, _path(parents[b], k)


def run(kdir: Path, budgets, bs: int, L: int, vocab: int, seed: int, tree_only: bool = False) -> dict:
    import torch

    conv = load(kdir / "causal_conv1d_triton.py", "ddt_conv")
    gdn = load(kdir / "fused_sigmoid_gating_recurrent.py", "ddt_gdn")
    scatter = load(kdir / "mamba_state_scatter_triton.py", "ddt_scatter")
    ddt = load(kdir / "ddtree_tree.py", "ddt_tree")
    ssm = load(kdir / "mamba_ssm.py", "ddt_mamba_ssm") if (kdir / "mamba_ssm.py").is_file() else None
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cpu").manual_seed(seed)
    results = []
    for budget in budgets:
        t0 = time.perf_counter()
        N = budget + 1
        logits = (torch.randn((bs, L, vocab), generator=g) * 2.5).to(dev)
        ids, lps = ddt.topk_logprobs(logits, budget)
        tree = ddt.build_ddtree(ids, lps, budget)
        _, nt, ns = ddt.tree_verify_arrays(tree)
        parents = tree.parents.cpu().tolist()
        valid = tree.valid.cpu().tolist()
        slots = bs + 1
        idx = torch.arange(1, bs + 1, dtype=torch.int32, device=dev)  # state slots (slot 0 pads)
        # intermediate caches are indexed by the request's position in the batch
        # (gdn_backend: verify_intermediate_state_indices = arange)
        ii = torch.arange(bs, dtype=torch.int32, device=dev)
        rec = {"budget": budget, "N": N, "nodes": int(tree.num_nodes.sum()), "max_depth_used": int(tree.depths.max())}

        # ---- causal conv1d, tree mode
        dim, width = 64, 4
        conv_state0 = torch.randn((slots, width - 1, dim), generator=g).to(dev).transpose(1, 2)  # stride(-2) == 1
        x = torch.randn((bs, N, dim), generator=g).to(dev).transpose(1, 2)  # (bs, dim, N), stride(1) == 1
        w = torch.randn((dim, width), generator=g).to(dev)
        bias = torch.randn((dim,), generator=g).to(dev)
        icw = torch.zeros((slots, N, dim, width - 1), device=dev)
        rpt = torch.full((bs, N), -7, dtype=torch.int64, device=dev)
        torch.cuda.synchronize()
        tc = time.perf_counter()
        out_tree = conv.causal_conv1d_update(
            x, conv_state0.clone(), w, bias, "silu", conv_state_indices=idx,
            intermediate_conv_window=icw, intermediate_state_indices=ii,
            retrieve_next_token=nt, retrieve_next_sibling=ns, retrieve_parent_token=rpt,
        )
        torch.cuda.synchronize()
        rec["conv_tree_first_call_s"] = round(time.perf_counter() - tc, 3)  # includes the Triton compile for this N
        print(f"budget {budget}: tree conv first call {rec['conv_tree_first_call_s']} s", file=sys.stderr, flush=True)
        if tree_only:
            results.append(rec)
            continue
        rpt_cpu = rpt.cpu().tolist()
        parent_ok = all(rpt_cpu[b][k] == parents[b][k] for b in range(bs) for k in range(1, N) if valid[b][k])
        conv_out_err = conv_win_err = 0.0
        by_depth = {}
        for b, k, path in _tree_nodes(parents, valid, bs, N):
            xp = x[b : b + 1, :, path].contiguous().transpose(1, 2).contiguous().transpose(1, 2)
            icw2 = torch.zeros((slots, N, dim, width - 1), device=dev)
            o = conv.causal_conv1d_update(
                xp, conv_state0.clone(), w, bias, "silu", conv_state_indices=idx[b : b + 1],
                intermediate_conv_window=icw2, intermediate_state_indices=ii[b : b + 1],
            )
            e = float((o[0, :, -1] - out_tree[b, :, k]).abs().max())
            d = len(path) - 1
            by_depth[d] = max(by_depth.get(d, 0.0), e)
            conv_out_err = max(conv_out_err, e)
            conv_win_err = max(conv_win_err, float((icw2[b, len(path) - 1] - icw[b, k]).abs().max()))
        rec.update(conv_parent_ok=parent_ok, conv_out_max_err=conv_out_err, conv_window_max_err=conv_win_err,
                   conv_out_err_by_depth=by_depth)
        # control: the same kernel in chain mode over a whole row, against prefix runs
        xs = x[0:1].contiguous().transpose(1, 2).contiguous().transpose(1, 2)
        full = conv.causal_conv1d_update(xs.clone(), conv_state0.clone(), w, bias, "silu", conv_state_indices=idx[0:1],
                                         intermediate_conv_window=torch.zeros_like(icw), intermediate_state_indices=ii[0:1])
        ctrl = 0.0
        for n in (1, 2, 3):
            xpp = xs[:, :, :n].contiguous().transpose(1, 2).contiguous().transpose(1, 2)
            o = conv.causal_conv1d_update(xpp, conv_state0.clone(), w, bias, "silu", conv_state_indices=idx[0:1],
                                          intermediate_conv_window=torch.zeros_like(icw), intermediate_state_indices=ii[0:1])
            ctrl = max(ctrl, float((o[0, :, -1] - full[0, :, n - 1]).abs().max()))
        rec["conv_chain_prefix_control_err"] = ctrl

        # ---- GDN target verify, tree mode
        H, HV, K, V = 2, 4, 16, 16
        T = bs * N
        q = torch.randn((1, T, H, K), generator=g).to(dev)
        k_ = torch.randn((1, T, H, K), generator=g).to(dev)
        v = torch.randn((1, T, HV, V), generator=g).to(dev)
        a = torch.randn((T, HV), generator=g).to(dev)
        bb = torch.randn((T, HV), generator=g).to(dev)
        A_log = torch.randn((HV,), generator=g).to(dev)
        dt_bias = torch.randn((HV,), generator=g).to(dev)
        ssm0 = torch.randn((slots, HV, K, V), generator=g).to(dev) * 0.1
        inter = torch.zeros((slots, N, HV, K, V), device=dev)
        qsl = torch.arange(0, T + 1, N, dtype=torch.int32, device=dev)
        common = dict(use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0, is_kda=False,
                      disable_state_update=True)
        torch.cuda.synchronize()
        tg = time.perf_counter()
        o_tree = gdn.fused_sigmoid_gating_delta_rule_update(
            A_log=A_log, dt_bias=dt_bias, q=q, k=k_, v=v, a=a, b=bb, initial_state_source=ssm0.clone(),
            initial_state_indices=idx, cu_seqlens=qsl, intermediate_states_buffer=inter,
            intermediate_state_indices=ii, cache_steps=N, retrieve_parent_token=rpt, **common,
        )
        torch.cuda.synchronize()
        rec["gdn_tree_first_call_s"] = round(time.perf_counter() - tg, 3)
        gdn_out_err = gdn_state_err = 0.0
        gdn_by_depth = {}
        for b, kk, path in _tree_nodes(parents, valid, bs, N):
            rows = [b * N + j for j in path]
            n = len(path)
            inter2 = torch.zeros((slots, N, HV, K, V), device=dev)
            o = gdn.fused_sigmoid_gating_delta_rule_update(
                A_log=A_log, dt_bias=dt_bias, q=q[:, rows].contiguous(), k=k_[:, rows].contiguous(),
                v=v[:, rows].contiguous(), a=a[rows].contiguous(), b=bb[rows].contiguous(),
                initial_state_source=ssm0.clone(), initial_state_indices=idx[b : b + 1],
                cu_seqlens=torch.tensor([0, n], dtype=torch.int32, device=dev),
                intermediate_states_buffer=inter2, intermediate_state_indices=ii[b : b + 1],
                cache_steps=N, retrieve_parent_token=None, **common,
            )
            gdn_out_err = max(gdn_out_err, float((o.reshape(n, HV, V)[-1] - o_tree.reshape(T, HV, V)[b * N + kk]).abs().max()))
            e = float((inter2[b, n - 1] - inter[b, kk]).abs().max())
            gdn_by_depth[n - 1] = max(gdn_by_depth.get(n - 1, 0.0), e)
            gdn_state_err = max(gdn_state_err, e)
        rec.update(gdn_out_max_err=gdn_out_err, gdn_state_max_err=gdn_state_err, gdn_state_err_by_depth=gdn_by_depth)

        # ---- Mamba2 selective_state_update, target verify, tree mode (mamba.py's call)
        if ssm is not None:
            nh, hd, ds, ng = 4, 16, 16, 2
            st0 = torch.randn((slots, nh, hd, ds), generator=g).to(dev) * 0.1
            xm = torch.randn((bs, N, nh, hd), generator=g).to(dev)
            dtm = torch.randn((bs, N, nh, hd), generator=g).to(dev)
            Am = -torch.rand((nh, hd, ds), generator=g).to(dev)
            Bm = torch.randn((bs, N, ng, ds), generator=g).to(dev)
            Cm = torch.randn((bs, N, ng, ds), generator=g).to(dev)
            Dm = torch.randn((nh, hd), generator=g).to(dev)
            dtb = torch.randn((nh, hd), generator=g).to(dev)
            outm = torch.empty_like(xm)
            interm = torch.zeros((slots, N, nh, hd, ds), device=dev)
            ssm.selective_state_update(st0.clone(), xm, dtm, Am, Bm, Cm, Dm, z=None, dt_bias=dtb, dt_softplus=True,
                                       state_batch_indices=idx, out=outm, disable_state_update=True,
                                       intermediate_states_buffer=interm, cache_steps=N,
                                       retrieve_parent_token=rpt, intermediate_state_indices=ii)
            m_out = m_state = 0.0
            for b in range(bs):
                for kk in range(N):
                    if not valid[b][kk]:
                        continue
                    path = _path(parents[b], kk)
                    n = len(path)
                    sel = lambda t: t[b : b + 1, path].contiguous()  # noqa: E731
                    o2 = torch.empty((1, n, nh, hd), device=dev)
                    i2 = torch.zeros((slots, N, nh, hd, ds), device=dev)
                    ssm.selective_state_update(st0.clone(), sel(xm), sel(dtm), Am, sel(Bm), sel(Cm), Dm, z=None,
                                               dt_bias=dtb, dt_softplus=True, state_batch_indices=idx[b : b + 1],
                                               out=o2, disable_state_update=True, intermediate_states_buffer=i2,
                                               cache_steps=N, retrieve_parent_token=None,
                                               intermediate_state_indices=ii[b : b + 1])
                    m_out = max(m_out, float((o2[0, -1] - outm[b, kk]).abs().max()))
                    m_state = max(m_state, float((i2[b, n - 1] - interm[b, kk]).abs().max()))
            rec.update(mamba2_out_max_err=m_out, mamba2_state_max_err=m_state)

        # ---- commit of the last accepted node (one per request: the deepest real node)
        last = torch.tensor([max(j for j in range(N) if valid[b][j]) for b in range(bs)], dtype=torch.int64, device=dev)
        dst = ssm0.clone()
        # layer axis first, as the pools' [layers, ...] tensors; dst slot idx[b] <- src[b, last[b]]
        scatter.fused_mamba_state_scatter_with_mask(dst.unsqueeze(0), inter.unsqueeze(0), idx, last)
        commit_err = max(float((dst[b + 1] - inter[b, int(last[b])]).abs().max()) for b in range(bs))
        untouched = float((dst[0] - ssm0[0]).abs().max())
        rec.update(commit_max_err=commit_err, pad_slot_untouched_err=untouched, last_nodes=last.tolist(),
                   seconds=round(time.perf_counter() - t0, 2))
        results.append(rec)
    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "triton": __import__("triton").__version__, "results": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", required=True, type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--budgets", default="8,24,63")
    ap.add_argument("--bs", type=int, default=3)
    ap.add_argument("--L", type=int, default=7)
    ap.add_argument("--vocab", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tree-only", action="store_true", help="only time the first tree-mode conv call per budget")
    a = ap.parse_args()
    res = run(a.kernels, [int(x) for x in a.budgets.split(",")], a.bs, a.L, a.vocab, a.seed, a.tree_only)
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
