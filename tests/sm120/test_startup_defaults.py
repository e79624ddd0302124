"""patches/sm120-startup-defaults.patch: Olmo2's default attention backend on
compute capability 12.x (through the pin's own ServerArgs resolution), and what
the pin already does for DeepSeek sparse attention (DSA) there (the patch's
refusal, dropped at v0.5.17)."""
import types

import pytest

from .support import SM120, SM121, describe, outcome, resolved

OVERRIDES = "sglang.srt.arg_groups.overrides"


def olmo2_backend(tree, device_key):
    return resolved(tree, device_key)["attention_backend"]


@pytest.mark.parametrize("device_key", [SM120, SM121])
def test_olmo2_default_backend_on_sm12x_is_triton(device_key, pristine_tree, patched_tree):
    """The pin's _olmo2_overrides gives fa3 to any CUDA device_sm >= 80 but SM100,
    i.e. to SM12x, where create_flashattention_v3_backend refuses it (below)."""
    assert olmo2_backend(pristine_tree, device_key) == ("fa3", "_olmo2_overrides")
    assert olmo2_backend(patched_tree, device_key) == ("triton", "_olmo2_overrides")


@pytest.mark.parametrize("device_key,expected", [("h200", "fa3"), ("b200", "trtllm_mha")])
def test_olmo2_controls_unchanged(device_key, expected, pristine_tree, patched_tree):
    got = [olmo2_backend(t, device_key) for t in (pristine_tree, patched_tree)]
    assert got == [(expected, "_olmo2_overrides")] * 2


@pytest.mark.parametrize("device_key,accepted", [(SM120, False), ("h200", True), ("b200", False)])
def test_fa3_backend_accepts_only_sm8x_sm90(device_key, accepted, pristine_tree, patched_tree, on_device):
    """attention_registry.create_flashattention_v3_backend (not patched) for a
    non-MLA model: the assertion that the pin's Olmo2 default runs into on SM12x.
    (On SM8x/SM90 it goes on to build the backend, a stand-in here.)"""
    runner = types.SimpleNamespace(use_mla_backend=False)
    got = []
    for tree in (pristine_tree, patched_tree):
        with on_device(tree, device_key, ["sglang.srt.layers.attention.attention_registry"]) as load:
            reg = load("sglang.srt.layers.attention.attention_registry")
            got.append(outcome(lambda: reg.create_flashattention_v3_backend(runner)))
    for result in got:
        assert (not isinstance(result, AssertionError)) is accepted, describe(result)
        if not accepted:
            assert "FlashAttention v3 Backend requires SM>=80 and SM<=90" in str(result)


# ---- DeepSeek sparse attention: what the pin does on SM12x ----------------------

def dsa_backends(tree, on_device, device_key, architecture, kv_cache_dtype):
    """The pin's _dsa_split_backend_resolution (the DSA arm's post-process pass)
    for ``architecture`` with ``kv_cache_dtype`` on the simulated device, no
    backend given: {field: declared value}."""
    hf = types.SimpleNamespace(architectures=[architecture], index_topk=2048)
    view = types.SimpleNamespace(get_model_config=lambda: types.SimpleNamespace(hf_config=hf),
                                 kv_cache_dtype=kv_cache_dtype, dsa_prefill_backend=None,
                                 dsa_decode_backend=None, enable_hisparse=False)
    with on_device(tree, device_key, ["sglang.srt.environ", OVERRIDES],
                   is_npu=lambda: False, is_xpu=lambda: False) as load:
        return load(OVERRIDES)._dsa_split_backend_resolution(view)


@pytest.mark.parametrize("device_key", [SM120, SM121])
def test_glm_dsa_fp8_on_sm12x_takes_the_sm12x_kernels(device_key, pristine_tree, patched_tree, on_device):
    """7f438a6031 (#26928, v0.5.17): GLM-5.1 with an FP8 KV cache on SM120/SM121
    runs on the flashinfer_sparse_mla DSA backends.  The pinned patch's blanket
    refusal of DSA on 12.x would stop it, so it is dropped; both trees agree."""
    want = {"dsa_prefill_backend": "flashinfer_sparse_mla", "dsa_decode_backend": "flashinfer_sparse_mla"}
    for tree in (pristine_tree, patched_tree):
        assert dsa_backends(tree, on_device, device_key, "GlmMoeDsaForCausalLM", "fp8_e4m3") == want


def test_deepseek_v32_on_sm120_keeps_the_sm100_defaults(pristine_tree, patched_tree, on_device):
    """Not changed, and not checked on a GPU here (docs/sm120.md, open point):
    DeepSeek V3.2 on 12.x resolves to the trtllm DSA backends of SM100."""
    got = [dsa_backends(t, on_device, SM120, "DeepseekV32ForCausalLM", "fp8_e4m3") for t in (pristine_tree, patched_tree)]
    assert got == [{"dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm"}] * 2
