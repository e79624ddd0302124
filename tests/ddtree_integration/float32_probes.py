"""Probes for ``--dtype float32`` (run in a fresh interpreter by child.py,
``module="tests.ddtree_integration.float32_probes"``).

``hybrid_kernels``: the Qwen3.5 hybrid's Gated DeltaNet and causal-conv calls,
as SGLang's GDN backend makes them for prefill/extend, decode, packed decode
and target verify (layers/attention/linear/gdn_backend.py and
kernels/gdn_triton.py), with the dtypes a server run gives them, each kernel
through Triton's front end (triton_frontend.py).  ``forward_extend_embeds``:
what ModelRunner.forward_extend hands a model as ``input_embeds``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from types import SimpleNamespace

FLA_MODULES = ("utils", "index", "op", "chunk", "chunk_delta_h", "chunk_fwd", "chunk_o", "cumsum", "l2norm", "wy_fast",
               "fused_recurrent", "layernorm_gated")
# Where the kernels live: up to v0.5.16 under srt/layers/attention and jit_kernel;
# from v0.5.17 under sglang/kernels/ops (the kernels package, #32648).
LAYOUTS = {
    "srt": dict(fla="sglang.srt.layers.attention.fla", conv="sglang.srt.layers.attention.mamba.causal_conv1d_triton",
                proj="sglang.jit_kernel.triton.gdn_fused_proj",
                extend="sglang.srt.layers.attention.triton_ops.extend_attention",
                prefill="sglang.srt.layers.attention.triton_ops.prefill_attention",
                kv_materialize="sglang.srt.speculative.triton_ops.fused_kv_materialize"),
    "kernels": dict(fla="sglang.kernels.ops.attention.fla", conv="sglang.kernels.ops.mamba.causal_conv1d_triton",
                    proj="sglang.kernels.ops.attention.triton_gdn_fused_proj",
                    extend="sglang.kernels.ops.attention.extend_attention",
                    prefill="sglang.kernels.ops.attention.prefill_attention",
                    kv_materialize="sglang.kernels.ops.speculative.fused_kv_materialize",
                    # the extend kernel's helpers (KV strides, score_mod tensors) live beside it
                    helpers=("sglang.kernels.ops.attention.decode_attention",
                             "sglang.kernels.ops.attention.score_mod")),
}
for _mods in LAYOUTS.values():
    _mods.update(fsg=f"{_mods['fla']}.fused_sigmoid_gating_recurrent", gating=f"{_mods['fla']}.fused_gdn_gating")
# by v0.5.23 the sigmoid-gating recurrence and the GDN gating left fla/ for kernels/ops/attention/linear/
LAYOUTS["kernels-linear"] = dict(LAYOUTS["kernels"], fsg="sglang.kernels.ops.attention.linear.fused_sigmoid_gating_recurrent",
                                 gating="sglang.kernels.ops.attention.linear.fused_gdn_gating")


def layout(root) -> dict:
    """The module names of the tree's kernels (``LAYOUTS``)."""
    attention = Path(root, "sglang", "kernels", "ops", "attention")
    if not (attention / "fla" / "chunk.py").is_file():
        return LAYOUTS["srt"]
    return LAYOUTS["kernels-linear" if (attention / "linear" / "fused_gdn_gating.py").is_file() else "kernels"]


def gdn_modules(mods: dict) -> list:
    return [f"{mods['fla']}.{m}" for m in FLA_MODULES] + [
        mods["fsg"], mods["gating"], mods["conv"], "sglang.srt.configs.mamba_utils", "sglang.srt.environ", mods["proj"], mods["extend"],
        mods["prefill"], mods["kv_materialize"], *mods.get("helpers", ())]


def _loader(root: str, real: list[str]):
    from sgl_overlay.harness.child import loader

    base = Path(root)
    common = loader.definitions(base, "sglang.srt.utils.common", ["cdiv", "next_power_of_2"], {})
    fakes = dict(torch_release=(2, 13), device_context=lambda device: contextlib.nullcontext(),
                 is_cuda=lambda: True, is_hip=lambda: False,
                 # v0.5.17's gated norm sizes its blocks from these (no batch-invariant mode,
                 # no piecewise prefill graphs: a server's defaults)
                 is_batch_invariant_mode_enabled=lambda: False,
                 check_cuda_graph_backend=lambda *a, **k: False, **common)
    return loader, loader.installed(base, real, fakes)


def _hybrid_shapes() -> dict:
    """The e2e check's hybrid (tools/gpu/e2e_models.py HYBRID): its GDN heads and conv width,
    its attention layer's heads (query, kv, head dim)."""
    from tests.gpu.e2e_script import models

    t, d = models.HYBRID["text_config"], models.drafter_config(models.HYBRID)
    return {"Hk": t["linear_num_key_heads"], "Hv": t["linear_num_value_heads"], "K": t["linear_key_head_dim"],
            "V": t["linear_value_head_dim"], "W": t["linear_conv_kernel_dim"],
            "attn": (t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]),
            "draft_kv": (d["num_key_value_heads"], d["head_dim"])}


def _extend_verify(mod, rnd, dt, bs, n, prefix, heads):
    """extend_attention_fwd as the Triton backend runs a TARGET_VERIFY: n new tokens per request
    over `prefix` cached ones, a custom mask (prefix visible, the block causal)."""
    import torch

    hq, hkv, d = heads
    pool = bs * (prefix + n) + 1
    kv_indices = torch.arange(1, 1 + bs * prefix, dtype=torch.int64)
    mask = torch.cat([torch.cat([torch.ones(n, prefix, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], 1)
                      .flatten() for _ in range(bs)])
    return mod.extend_attention_fwd(
        rnd(bs * n, hq, d), rnd(bs * n, hkv, d), rnd(bs * n, hkv, d), torch.empty(bs * n, hq, d, dtype=dt),
        rnd(pool, hkv, d), rnd(pool, hkv, d),
        torch.arange(0, bs * n + 1, n, dtype=torch.int32), torch.arange(0, bs * prefix + 1, prefix, dtype=torch.int32),
        kv_indices, mask, False, torch.arange(0, bs * n * (prefix + n) + 1, n * (prefix + n), dtype=torch.int64),
        n, 1.0, 1.0)


def _fused_norm_rope(mod, rnd, dt, T, heads, head_dim):
    """DFlash's drafter KV materialization (fused k_norm + RoPE) for one layer:
    ``_fused_norm_rope`` up to v0.5.16, the stacked form (all draft layers at
    once, here one) from v0.5.17."""
    import torch

    cos_sin = rnd(4096, head_dim, dtype=torch.float32)
    if hasattr(mod, "_fused_norm_rope"):
        return mod._fused_norm_rope(rnd(T, 2 * heads * head_dim), torch.ones(head_dim, dtype=dt), cos_sin,
                                    torch.arange(T), heads, head_dim, head_dim)
    return mod._fused_norm_rope_stacked(rnd(T, 1, 2 * heads * head_dim), torch.ones(1, head_dim, dtype=dt),
                                        torch.full((1,), 1e-6), cos_sin, torch.arange(T), heads, head_dim, head_dim)


def hybrid_kernels(root: str, dtype: str = "float32", env: dict | None = None, calls: list | None = None) -> dict:
    """Each call's outcome ("returned" or the exception) and every kernel it
    compiled: name, ok or the compiler's error, its dots' input precisions and
    a digest of its TTIR (source locations left out).  ``env`` is set before
    any module is loaded (e.g. e2e.lossless_env("float32")); the Mamba conv
    state's dtype is the tree's own ``mamba2_state_dtype`` under it, the SSM
    state float32 (the hybrid's ``mamba_ssm_dtype``)."""
    os.environ.update(env or {})
    os.environ["FLA_CACHE_RESULTS"] = "0"  # the autotuner's disk cache: nothing written outside
    import torch

    from tests.ddtree_integration import triton_frontend as fe

    fe.activate()
    mods = layout(root)
    FLA = mods["fla"]
    # the SM count a kernel wrapper asks torch for: the H200's, the target triton_frontend compiles for
    torch.cuda.get_device_properties = lambda device=None: SimpleNamespace(multi_processor_count=132)
    loader, installed = _loader(root, gdn_modules(mods))
    dt = getattr(torch, dtype)
    s = _hybrid_shapes()
    Hk, Hv, K, V, W = s["Hk"], s["Hv"], s["K"], s["V"], s["W"]
    D = 2 * Hk * K + Hv * V  # the packed q|k|v width the conv runs over
    out = {"calls": {}}
    with installed:
        L = loader.load
        chunk, fsg, fr = L(f"{FLA}.chunk"), L(mods["fsg"]), L(f"{FLA}.fused_recurrent")
        gating, lng, conv = L(mods["gating"]), L(f"{FLA}.layernorm_gated"), L(mods["conv"])
        state_dtype = L("sglang.srt.configs.mamba_utils").mamba2_state_dtype(None)
        conv_dt = state_dtype.conv
        out["conv_state_dtype"] = str(conv_dt)
        g = torch.Generator().manual_seed(0)

        def rnd(*shape, dtype=dt):
            return torch.randn(*shape, generator=g).to(dtype)

        # prefill/extend: two sequences of 60 and 40 tokens; decode and verify: 2 requests,
        # verify with DFlash's block of 16 draft tokens
        T, bs, N = 100, 2, 16
        cu = torch.tensor([0, 60, 100], dtype=torch.int64)
        slots = torch.tensor([1, 2], dtype=torch.int32)
        ssm = torch.zeros(8, Hv, V, K, dtype=torch.float32)
        conv_states = torch.zeros(8, D, W - 1, dtype=conv_dt)
        A_log, dt_bias = rnd(Hv, dtype=torch.float32), rnd(Hv)
        a, b = rnd(T, Hv), rnd(T, Hv)
        q, k, v = rnd(1, T, Hk, K), rnd(1, T, Hk, K), rnd(1, T, Hv, V)
        conv_w = rnd(D, W)
        tree = {"retrieve_next_token": torch.full((bs, N), -1, dtype=torch.int64),
                "retrieve_next_sibling": torch.full((bs, N), -1, dtype=torch.int64),
                "retrieve_parent_token": torch.arange(-1, N - 1, dtype=torch.int64).repeat(bs, 1)}
        gate_kw = dict(A_log=A_log, dt_bias=dt_bias, use_qk_l2norm_in_kernel=True, softplus_beta=1.0,
                       softplus_threshold=20.0, initial_state_source=ssm, initial_state_indices=slots)
        every = {
            "extend.causal_conv1d_fn": lambda: conv.causal_conv1d_fn(
                rnd(D, T), conv_w, None, conv_states=conv_states, query_start_loc=cu.to(torch.int32),
                seq_lens_cpu=[60, 40], cache_indices=slots, has_initial_state=torch.tensor([False, True]),
                activation="silu"),
            "extend.fused_gdn_gating": lambda: gating.fused_gdn_gating(A_log, a, b, dt_bias),
            "extend.chunk_gated_delta_rule": lambda: chunk.chunk_gated_delta_rule(
                q=q, k=k, v=v, g=-rnd(1, T, Hv, dtype=torch.float32).abs(), beta=torch.rand(1, T, Hv, generator=g).to(dt),
                initial_state=ssm, initial_state_indices=slots.long(), cu_seqlens=cu, head_first=False,
                use_qk_l2norm_in_kernel=True),
            # the fused kkt + solve kernel alone (chunk_gated_delta_rule's first step, not behind its dtype check)
            "extend.kkt_solve": lambda: L(f"{FLA}.chunk_fwd").chunk_gated_delta_rule_fwd_intra(
                k=k, v=v, g=-rnd(1, T, Hv, dtype=torch.float32).abs(), beta=torch.rand(1, T, Hv, generator=g).to(dt),
                cu_seqlens=cu),
            "decode.causal_conv1d_update": lambda: conv.causal_conv1d_update(
                rnd(bs, D), conv_states, conv_w, None, "silu", conv_state_indices=slots),
            "decode.packed": lambda: fr.fused_recurrent_gated_delta_rule_packed_decode(
                mixed_qkv=rnd(bs, D), a=a[:bs].contiguous(), b=b[:bs].contiguous(), A_log=A_log, dt_bias=dt_bias,
                scale=K ** -0.5, initial_state=ssm, out=torch.empty(bs, 1, Hv, V, dtype=dt),
                ssm_state_indices=slots, use_qk_l2norm_in_kernel=True),
            "decode.fused_sigmoid_gating": lambda: fsg.fused_sigmoid_gating_delta_rule_update(
                q=q[:, :bs], k=k[:, :bs], v=v[:, :bs], a=a[:bs], b=b[:bs],
                cu_seqlens=torch.tensor([0, 1, 2], dtype=torch.int32), **gate_kw),
            "verify.causal_conv1d_update": lambda: conv.causal_conv1d_update(
                rnd(bs, D, N), conv_states, conv_w, None, "silu", conv_state_indices=slots,
                intermediate_conv_window=torch.zeros(4, N, D, W - 1, dtype=conv_dt),
                intermediate_state_indices=slots, **tree),
            "verify.fused_sigmoid_gating": lambda: fsg.fused_sigmoid_gating_delta_rule_update(
                q=q[:, :bs * N], k=k[:, :bs * N], v=v[:, :bs * N], a=a[:bs * N], b=b[:bs * N],
                cu_seqlens=torch.tensor([0, N, 2 * N], dtype=torch.int32), is_kda=False, disable_state_update=True,
                intermediate_states_buffer=torch.zeros(4, N, Hv, V, K, dtype=torch.float32),
                intermediate_state_indices=slots, cache_steps=N,
                retrieve_parent_token=tree["retrieve_parent_token"], **gate_kw),
            # the linear-attention layer's input split (models/qwen3_5.py, every forward)
        "proj.fused_qkvzba_split": lambda: L(mods["proj"])
            .fused_qkvzba_split_reshape_cat_contiguous(rnd(bs, D + Hv * V), rnd(bs, 2 * Hv), Hk, Hv, K, V),
        # the attention layer's target verify: the Triton backend's extend kernel with the
        # verify's custom mask (DFlash's block of N over a prefix of 20 per request)
        "verify.extend_attention": lambda: _extend_verify(
            L(mods["extend"]), rnd, dt, bs, N, 20, s["attn"]),
        # DFlash's drafter: its KV cache materialized from the target's features (fused k_norm + RoPE)
        "draft.fused_norm_rope": lambda: _fused_norm_rope(L(mods["kv_materialize"]), rnd, dt, T, *s["draft_kv"]),
        "norm.rms_norm_gated": lambda: lng.rms_norm_gated(
                x=rnd(T * Hv, V), weight=torch.ones(V, dtype=dt), bias=None, z=rnd(T * Hv, V), eps=1e-6,
                group_size=V, norm_before_gate=True, is_rms_norm=True),
        }
        for name in calls or every:
            n0 = len(fe.RECORDS)
            try:
                every[name]()
                outcome = "returned"
            except Exception as e:  # noqa: BLE001 - the wrapper's refusal is the result
                outcome = f"{type(e).__name__}: {e}"
            kernels = []
            for r in fe.RECORDS[n0:]:
                k_ = {"kernel": r["kernel"], "ok": r["ok"]}
                if r["ok"]:
                    k_.update(dots=r["dots"], ttir_sha256=hashlib.sha256(r["ttir"].encode()).hexdigest())
                else:
                    k_["error"] = r["error"][:600]
                kernels.append(k_)
            out["calls"][name] = {"outcome": outcome, "kernels": kernels}
    return out


def forward_extend_embeds(root: str, model_dtype: str, embeds_dtype: str) -> dict:
    """The tree's own extend path on a forward batch that carries
    ``input_embeds`` (as DFlash's draft block does), for a runner of
    ``model_dtype``: ModelRunner.forward_extend up to v0.5.16;
    ModelRunner._extend_forward_kwargs from v0.5.17, whose kwargs the
    EagerRunner (and the prefill CUDA-graph path) hands to
    ``model.forward(input_ids, positions, forward_batch, **kwargs)``.
    Returns the dtype the model receives, and whether the model's first
    projection (``F.linear`` with weights of the model's dtype, as the
    drafter's unquantized ``qkv_proj`` runs it) accepts it."""
    import torch
    import torch.nn.functional as F

    from sgl_overlay.harness.child.standins import install_transformers_standin

    install_transformers_standin()
    loader, installed = _loader(root, ["sglang.srt.model_executor.model_runner"])
    mdt, edt = getattr(torch, model_dtype), getattr(torch, embeds_dtype)
    with installed:
        ModelRunner = loader.load("sglang.srt.model_executor.model_runner").ModelRunner
        weight = torch.randn(8, 16, generator=torch.Generator().manual_seed(0)).to(mdt)
        seen = {}

        class Drafter:
            def forward(self, input_ids, positions, forward_batch, input_embeds=None, **kwargs):
                seen["dtype"] = str(input_embeds.dtype)
                return F.linear(input_embeds, weight)

        runner = object.__new__(ModelRunner)
        for name, value in dict(support_pp=False, dtype=mdt, is_generation=True, piecewise_cuda_graph_runner=None,
                                device_timer=None, model=Drafter(),
                                attn_backend=SimpleNamespace(init_forward_metadata=lambda fb: None)).items():
            object.__setattr__(runner, name, value)
        batch = SimpleNamespace(input_embeds=torch.randn(4, 16).to(edt), replace_embeds=None, replace_positions=None,
                                input_ids=torch.zeros(4, dtype=torch.int64), positions=torch.arange(4))
        try:
            if hasattr(ModelRunner, "_extend_forward_kwargs"):  # v0.5.17+
                kwargs = ModelRunner._extend_forward_kwargs(runner, batch, None)
                runner.model.forward(batch.input_ids, batch.positions, batch, **kwargs)
            else:
                ModelRunner.forward_extend(runner, batch)
            seen["linear"] = "ok"
        except RuntimeError as e:
            seen["linear"] = str(e)
    return seen


def upstream_unit_test(root: str, path: str) -> dict:
    """An upstream-style unit test file of the port (SGLang's test/ layout) run
    with unittest against the tree, its module under test
    (model_executor/model_runner.py) and sglang.test.ci.ci_register loaded from
    the tree by the harness's targeted loader (SGLang's other modules, and the
    GPU dependencies they import, stay inert stand-ins).  Returns the tests run
    and each failure or error."""
    import importlib.util
    import io
    import unittest

    from sgl_overlay.harness.child.standins import install_transformers_standin

    install_transformers_standin()
    real = ["sglang.srt.model_executor.model_runner", "sglang.test.ci.ci_register"]
    loader, installed = _loader(root, real)
    with installed:
        for name in real:
            loader.load(name)
        spec = importlib.util.spec_from_file_location("upstream_unit_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        stream = io.StringIO()
        result = unittest.TextTestRunner(stream=stream, verbosity=2).run(
            unittest.defaultTestLoader.loadTestsFromModule(module))
    return {"run": result.testsRun,
            "failed": [(str(t), tb.strip().splitlines()[-1]) for t, tb in result.failures + result.errors],
            "log": stream.getvalue()[-2000:]}
