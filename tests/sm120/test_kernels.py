"""patches/sm120-kernel-tables.patch: DeepGEMM's enablement and the PD
multiplexing green-context table on compute capability 12.x."""
import logging
import sys
import types

import pytest

from .support import PDMUX, SM120, SM121, SPLITS, both_trees, pdmux_stream_groups, pristine_fails

CONFIGURER = "sglang.srt.layers.deep_gemm_wrapper.configurer"


def deep_gemm_flags(on_device, tree, device_key, monkeypatch):
    """The configurer's module-level decisions at import. deep_gemm imports, as
    on any install of the pin (its wheel requires sgl-deep-gemm==0.1.5.post1)."""
    monkeypatch.setitem(sys.modules, "deep_gemm", types.ModuleType("deep_gemm"))
    with on_device(tree, device_key, [CONFIGURER]) as load:
        c = load(CONFIGURER)
        return dict(enable=c.ENABLE_JIT_DEEPGEMM, blackwell=c.DEEPGEMM_BLACKWELL,
                    ue8m0=c.DEEPGEMM_SCALE_UE8M0, tma_aligned_scales=c.DEEPGEMM_NEED_TMA_ALIGNED_SCALES)


OFF = dict(enable=False, blackwell=False, ue8m0=False, tma_aligned_scales=True)


def test_deep_gemm_is_off_on_sm120_in_both_trees(pristine_tree, patched_tree, on_device, monkeypatch):
    """The pin turns DeepGEMM off for sm_version == 120 (524ba10eda, #24692) and
    keeps the UE8M0 scale format for SM100 (e76d36214b, #26496), both v0.5.13:
    that part of the patch is upstream's."""
    monkeypatch.delenv("SGLANG_ENABLE_JIT_DEEPGEMM", raising=False)
    got = {n: deep_gemm_flags(on_device, t, SM120, monkeypatch) for n, t in both_trees(pristine_tree, patched_tree).items()}
    assert got == {"pristine": OFF, "patched": OFF}


@pristine_fails(AssertionError, "the pin's check is sm_version == 120: GB10 (12.1) gets DeepGEMM, "
                                "whose kernels need SM90 WGMMA or SM100 tcgen05")
def test_deep_gemm_is_off_on_sm121(sglang_tree, on_device, monkeypatch):
    monkeypatch.delenv("SGLANG_ENABLE_JIT_DEEPGEMM", raising=False)
    assert deep_gemm_flags(on_device, sglang_tree, SM121, monkeypatch) == OFF


@pristine_fails(AssertionError, "the pin ignores an explicit SGLANG_ENABLE_JIT_DEEPGEMM=1 on SM12x without a word")
def test_deep_gemm_forced_on_sm120_stays_off_and_says_why(sglang_tree, on_device, monkeypatch, caplog):
    monkeypatch.setenv("SGLANG_ENABLE_JIT_DEEPGEMM", "1")
    caplog.set_level(logging.WARNING)
    assert deep_gemm_flags(on_device, sglang_tree, SM120, monkeypatch) == OFF
    assert any("no kernels for SM120" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("device_key,expected", [
    ("h200", dict(enable=True, blackwell=False, ue8m0=False, tma_aligned_scales=True)),
    ("b200", dict(enable=True, blackwell=True, ue8m0=True, tma_aligned_scales=False)),
])
def test_deep_gemm_controls_unchanged(device_key, expected, pristine_tree, patched_tree, on_device, monkeypatch):
    monkeypatch.delenv("SGLANG_ENABLE_JIT_DEEPGEMM", raising=False)
    got = {n: deep_gemm_flags(on_device, t, device_key, monkeypatch)
           for n, t in both_trees(pristine_tree, patched_tree).items()}
    assert got == {"pristine": expected, "patched": expected}


# ---- PD multiplexing ----------------------------------------------------------

@pristine_fails(AssertionError, "the pin's get_arch_constraints knows majors 6-9: "
                                "ValueError: Unsupported compute capability: 12.0")
def test_pdmux_on_sm120(sglang_tree, on_device, monkeypatch):
    assert pdmux_stream_groups(on_device, sglang_tree, SM120, monkeypatch) == SPLITS[188]


@pristine_fails(AssertionError, "ValueError: Unsupported compute capability: 10.0 on the pin too "
                                "(the one place where 10.0 changes, on purpose)")
def test_pdmux_on_b200(sglang_tree, on_device, monkeypatch):
    assert pdmux_stream_groups(on_device, sglang_tree, "b200", monkeypatch) == SPLITS[148]


def test_pdmux_on_h200_unchanged(pristine_tree, patched_tree, on_device, monkeypatch):
    got = {n: pdmux_stream_groups(on_device, t, "h200", monkeypatch)
           for n, t in both_trees(pristine_tree, patched_tree).items()}
    assert got == {"pristine": SPLITS[132], "patched": SPLITS[132]}


def test_pdmux_still_refuses_unknown_majors(patched_tree, on_device):
    with on_device(patched_tree, SM120, [PDMUX]) as load:
        mod = load(PDMUX)
        with pytest.raises(ValueError, match=r"Unsupported compute capability: 13\.0 .*6\.x to 12\.x"):
            mod.get_arch_constraints((13, 0))
