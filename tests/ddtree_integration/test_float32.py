"""``--dtype float32`` for DFLASH/DDTREE and the Qwen3.5 hybrid (docs/results/gpu.md,
"What float32 needed"): the two failures of the H200 run (on v0.5.12.post1)
reproduced on the pin, SGLang v0.5.17 (its kernels moved to sglang/kernels/ops:
float32_probes.layout), and fixed by float32-draft-embeddings.patch,
float32-gdn-chunk.patch and the e2e check's float32 environment
(e2e_lossless_runs.lossless_env).

The hybrid's kernels go through Triton's own front end (AST -> TTIR, the
stage that raised on the H200) for an H200 target, launched by SGLang's own
wrappers (triton_frontend.py, float32_probes.py): these tests need the
pin's triton (3.6.0, the device's) and einops, the `[kernels]` extra, which
`[test]` does not bring (188 MB), and skip without them.
"""

import importlib.util
import os

import pytest

from tests.ddtree_integration.run import probe
from tests.gpu.e2e_script import e2e_lossless_runs

PROBES = "tests.ddtree_integration.float32_probes"
# the pin's triton: torch 2.11's, the device's (triton 3.9 no longer compiles the GDN chunk
# kernels in any dtype: tl.make_block_ptr was removed; docs/gpu.md)
PIN_TRITON = "3.6."


def _kernel_deps():
    if not (importlib.util.find_spec("triton") and importlib.util.find_spec("einops")):
        return "triton and einops are not installed (the [kernels] extra, not in [test])"
    from importlib.metadata import version

    if not version("triton").startswith(PIN_TRITON):
        return f"triton {version('triton')} is not the pin's ({PIN_TRITON}x): pip install -e '.[kernels]'"
    if os.environ.get("TRITON_INTERPRET"):
        return "TRITON_INTERPRET is set: these tests need Triton's compiler front end, not its interpreter"
    return None


needs_triton = pytest.mark.skipif(_kernel_deps() is not None, reason=str(_kernel_deps()))
F32_ENV = e2e_lossless_runs.lossless_env("float32")
_CACHE: dict = {}


def hybrid(tree, dtype, env=None, calls=None):
    key = (str(tree), dtype, tuple(sorted((env or {}).items())), tuple(calls or ()))
    if key not in _CACHE:
        r = probe(tree, "hybrid_kernels", timeout=600, module=PROBES, dtype=dtype, env=env or {}, calls=calls)
        assert r.get("ok"), r
        _CACHE[key] = r["value"]
    return _CACHE[key]


def failures(result):
    """(call, kernel or None, what) for every call that raised and every kernel that did not compile."""
    out = []
    for name, c in result["calls"].items():
        if c["outcome"] != "returned":
            out.append((name, None, c["outcome"]))
        out += [(name, k["kernel"], k["error"]) for k in c["kernels"] if not k["ok"]]
    return out


@needs_triton
def test_pin_float32_hybrid_fails_to_compile_as_on_the_h200(pristine_tree):
    """The H200's start-up error (`CompilationError: at 105:8:`) is the causal conv1d's prefill
    kernel: the Mamba conv states stay bfloat16 (SGLANG_MAMBA_CONV_DTYPE's default) under
    --dtype float32, and the kernel's if/else branches then load bfloat16 and make float32 zeros.
    Its verify (tree) path fails likewise; and past the conv, the GDN chunk path refuses float32.
    (The source positions Triton names are the pin's: 105:8 as on the H200 with v0.5.12.post1.)"""
    r = hybrid(pristine_tree, "float32")
    assert r["conv_state_dtype"] == "torch.bfloat16"
    got = {(call, kernel): what.splitlines()[0] for call, kernel, what in failures(r)}
    assert got[("extend.causal_conv1d_fn", "_causal_conv1d_fwd_kernel")] == "CompilationError: at 105:8:", got
    got = {k: (v.split(":")[0] if v.startswith("CompilationError") else v) for k, v in got.items()}
    assert got == {
        ("extend.causal_conv1d_fn", "_causal_conv1d_fwd_kernel"): "CompilationError",
        ("verify.causal_conv1d_update", "_causal_conv1d_update_kernel"): "CompilationError",
        ("extend.chunk_gated_delta_rule", None):
            "AssertionError: ChunkGatedDeltaRuleFunction does not support float32. Please use bfloat16.",
    }, got


@needs_triton
def test_float32_environment_and_patch_compile_every_hybrid_kernel(pristine_tree, patched_tree):
    """With e2e's float32 environment (conv states float32, TRITON_F32_DEFAULT=ieee) every
    kernel of the hybrid's prefill, decode, packed decode, verify (the attention layer's extend
    kernel with the verify mask included), input split, gated norm and DFlash's drafter KV
    materialization compiles for float32 on
    the patched tree, and every tl.dot among them is IEEE; the pin still refuses in the GDN
    chunk path (float32-gdn-chunk.patch), and nothing else."""
    pin = hybrid(pristine_tree, "float32", F32_ENV)
    assert pin["conv_state_dtype"] == "torch.float32"
    assert [(c, k) for c, k, _ in failures(pin)] == [("extend.chunk_gated_delta_rule", None)]

    r = hybrid(patched_tree, "float32", F32_ENV)
    assert r["conv_state_dtype"] == "torch.float32"
    assert failures(r) == []
    kernels = {k["kernel"] for c in r["calls"].values() for k in c["kernels"]}
    # the chunk path's kernels are among them (it ran to its end)
    assert {"chunk_gated_delta_rule_fwd_kkt_solve_kernel", "recompute_w_u_fwd_kernel",
            "chunk_gated_delta_rule_fwd_kernel_h_blockdim64", "chunk_fwd_kernel_o", "l2norm_fwd_kernel",
            "chunk_local_cumsum_scalar_kernel", "_causal_conv1d_fwd_kernel", "_causal_conv1d_update_kernel",
            "fused_sigmoid_gating_delta_rule_update_kernel", "fused_gdn_gating_kernel",
            "fused_recurrent_gated_delta_rule_packed_decode_kernel", "_layer_norm_fwd_1pass_kernel",
            "fused_qkvzba_split_reshape_cat_contiguous_kernel", "_fwd_kernel"} <= kernels
    # DFlash's KV materialization: one layer's kernel up to v0.5.16, the stacked one from v0.5.17
    assert kernels & {"_fused_norm_rope_kernel", "_fused_norm_rope_kernel_stacked"}, kernels
    precisions = {}
    for c in r["calls"].values():
        for k in c["kernels"]:
            for p, n in k["dots"].items():
                precisions[p] = precisions.get(p, 0) + n
    assert set(precisions) == {"ieee"} and precisions["ieee"] > 0, precisions


@needs_triton
def test_merge_dots_follow_triton_f32_default(pristine_tree, patched_tree):
    """The fused kkt + solve kernel's block-merge dots name their precision (TF32 on an H200),
    which TRITON_F32_DEFAULT does not override: its 16 merge dots stay TF32 on the pin under
    TRITON_F32_DEFAULT=ieee (its 10 K @ K^T dots name none: IEEE), none on the patched tree.  Without the variable both trees
    compile the same kernel (float32 and bfloat16)."""
    call = ["extend.kkt_solve"]

    def kkt(tree, dtype, env=None):
        (k,) = {k["kernel"]: k for k in hybrid(tree, dtype, env, call)["calls"][call[0]]["kernels"]
                if k["kernel"] == "chunk_gated_delta_rule_fwd_kkt_solve_kernel"}.values()
        assert k["ok"], k
        return k

    ieee = {"TRITON_F32_DEFAULT": "ieee"}
    pin, patched = kkt(pristine_tree, "float32", ieee), kkt(patched_tree, "float32", ieee)
    assert pin["dots"] == {"tf32": 16, "ieee": 10}, pin["dots"]
    assert patched["dots"] == {"ieee": 26}, patched["dots"]
    for dtype in ("float32", "bfloat16"):
        a, b = kkt(pristine_tree, dtype), kkt(patched_tree, dtype)
        assert a["ttir_sha256"] == b["ttir_sha256"] and a["dots"] == b["dots"] == {"tf32": 26}, (dtype, a, b)


@needs_triton
def test_bfloat16_kernels_unchanged(pristine_tree, patched_tree):
    """bfloat16 (SGLang's default dtypes, no float32 environment): every call behaves and every
    kernel compiles to the same TTIR on the pin and on the patched tree."""
    a, b = hybrid(pristine_tree, "bfloat16"), hybrid(patched_tree, "bfloat16")
    assert failures(a) == [] and failures(b) == []
    assert a["conv_state_dtype"] == b["conv_state_dtype"] == "torch.bfloat16"

    def digests(r):
        return {name: [(k["kernel"], k["ttir_sha256"]) for k in c["kernels"]] for name, c in r["calls"].items()}

    assert digests(a) == digests(b)
    assert sum(len(c["kernels"]) for c in a["calls"].values()) >= 15


def embeds(tree, model_dtype, embeds_dtype="float32"):
    r = probe(tree, "forward_extend_embeds", module=PROBES, model_dtype=model_dtype, embeds_dtype=embeds_dtype)
    assert r.get("ok"), r
    return r["value"]


def test_float32_drafter_gets_float32_embeddings(pristine_tree, patched_tree):
    """DFlash's draft block hands the target's token embeddings to the drafter as input_embeds;
    ModelRunner.forward_extend cast them to bfloat16 whatever the model's dtype, and a float32
    drafter's first projection then died as on the H200 ("expected m1 and m2 to have the same
    dtype, but got: c10::BFloat16 != float"; CUDA says mat1/mat2).  float32-draft-embeddings.patch
    keeps them float32 for a float32 model."""
    pin = embeds(pristine_tree, "float32")
    assert pin["dtype"] == "torch.bfloat16"
    assert "BFloat16 != float" in pin["linear"]
    assert embeds(patched_tree, "float32") == {"dtype": "torch.float32", "linear": "ok"}


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16"])
def test_other_dtypes_keep_the_bfloat16_cast(pristine_tree, patched_tree, model_dtype):
    """bfloat16 and float16 models get exactly what the pin gives them (bfloat16)."""
    a, b = embeds(pristine_tree, model_dtype), embeds(patched_tree, model_dtype)
    assert a == b and a["dtype"] == "torch.bfloat16"
