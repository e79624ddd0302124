"""patches/sm120-startup-defaults.patch: ServerArgs defaults for Olmo2 and for
DeepSeek sparse attention (DSA) on compute capability 12.x."""
import types

import pytest

from .support import SM120, both_trees, describe, model_adjustments, outcome, pristine_fails

OLMO2 = "Olmo2ForCausalLM"
DSA = "DeepseekV32ForCausalLM"
# DeepSeek-V3.2's config.json fields the adjustments read: the DSA indexer's
# top-k (what makes it DSA) and its block-FP8 checkpoint.
DSA_CONFIG = dict(index_topk=2048, quantization_config={
    "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})


def olmo2_backend(on_device, tree, device_key):
    out = model_adjustments(on_device, tree, device_key, OLMO2)
    assert not isinstance(out, Exception), out
    return out["attention_backend"]


@pristine_fails(AssertionError, "the pin picks fa3 for any SM >= 80 that is not SM100, so SM12x gets fa3, "
                                "which create_flashattention_v3_backend refuses")
def test_olmo2_default_backend_on_sm120_is_triton(sglang_tree, on_device):
    assert olmo2_backend(on_device, sglang_tree, SM120) == "triton"


@pytest.mark.parametrize("device_key,expected", [("h200", "fa3"), ("b200", "trtllm_mha")])
def test_olmo2_controls_unchanged(device_key, expected, pristine_tree, patched_tree, on_device):
    got = {n: olmo2_backend(on_device, t, device_key) for n, t in both_trees(pristine_tree, patched_tree).items()}
    assert got == {"pristine": expected, "patched": expected}


@pytest.mark.parametrize("device_key,accepted", [(SM120, False), ("h200", True), ("b200", False)])
def test_fa3_backend_accepts_only_sm8x_sm90(device_key, accepted, pristine_tree, patched_tree, on_device):
    """attention_registry.create_flashattention_v3_backend (not patched) for a
    non-MLA model: the assertion that the pin's Olmo2 default runs into on SM12x."""
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


# ---- DeepSeek sparse attention --------------------------------------------------

def dsa_defaults(on_device, tree, device_key):
    return model_adjustments(on_device, tree, device_key, DSA, DSA_CONFIG)


@pristine_fails(AssertionError, "the pin treats every major >= 10 as SM100 for DSA: fp8_e4m3 KV cache, "
                                "trtllm prefill and decode, on kernels SM12x does not have")
def test_dsa_on_sm120_is_refused_with_the_reason(sglang_tree, on_device):
    result = dsa_defaults(on_device, sglang_tree, SM120)
    assert isinstance(result, ValueError), result
    message = str(result)
    assert DSA in message and "compute capability 12.x" in message
    assert "DeepGEMM" in message and "SM90/SM100" in message


def test_dsa_on_sm120_pristine_took_the_sm100_path(pristine_tree, on_device):
    """What the pin chose on SM12x (the 'before' of docs/sm120.md)."""
    got = dsa_defaults(on_device, pristine_tree, SM120)
    assert (got["attention_backend"], got["kv_cache_dtype"], got["nsa_prefill_backend"],
            got["nsa_decode_backend"]) == ("nsa", "fp8_e4m3", "trtllm", "trtllm")


@pytest.mark.parametrize("device_key,expected", [
    ("h200", ("nsa", "bfloat16", "flashmla_sparse", "fa3", 64)),
    ("b200", ("nsa", "fp8_e4m3", "trtllm", "trtllm", 64)),
])
def test_dsa_controls_unchanged(device_key, expected, pristine_tree, patched_tree, on_device):
    got = {}
    for name, tree in both_trees(pristine_tree, patched_tree).items():
        out = dsa_defaults(on_device, tree, device_key)
        assert not isinstance(out, Exception), out
        got[name] = (out["attention_backend"], out["kv_cache_dtype"], out["nsa_prefill_backend"],
                     out["nsa_decode_backend"], out["page_size"])
    assert got == {"pristine": expected, "patched": expected}
