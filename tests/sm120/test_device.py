"""The simulated device itself: upstream's own helpers read it as the real GPU,
and the loader leaves nothing behind between trees and devices."""
import sys

import pytest
import torch

from sgl_overlay.harness.child import loader

from .support import DEVICES, simulate, tree_helpers

# What the pin's helpers must say for each device (SGLang's own predicates).
EXPECTED = {
    "rtx-pro-6000": dict(get_device_sm=120, is_sm120_supported=True, is_blackwell=True,
                         is_sm100_supported=False, is_sm90_supported=False,
                         is_hopper_with_cuda_12_3=False),
    "h200": dict(get_device_sm=90, is_sm120_supported=False, is_blackwell=False,
                 is_sm100_supported=False, is_sm90_supported=True, is_hopper_with_cuda_12_3=True),
    "b200": dict(get_device_sm=100, is_sm120_supported=False, is_blackwell=True,
                 is_sm100_supported=True, is_sm90_supported=False, is_hopper_with_cuda_12_3=False),
    "gb10": dict(get_device_sm=121, is_sm120_supported=True, is_blackwell=True,
                 is_sm100_supported=False, is_sm90_supported=False, is_hopper_with_cuda_12_3=False),
}


@pytest.mark.parametrize("key", sorted(DEVICES))
def test_upstream_helpers_read_the_simulated_device(key, pristine_tree, monkeypatch):
    dev = DEVICES[key]
    simulate(monkeypatch, dev)
    h = tree_helpers(pristine_tree)
    assert h["is_cuda"]() is True and h["is_hip"]() is False
    assert {k: h[k]() for k in EXPECTED[key]} == EXPECTED[key]
    assert h["get_device_name"]() == dev.name
    assert h["get_device_capability"]() == dev.capability
    props = torch.cuda.get_device_properties(0)
    assert (props.name, props.major, props.minor, props.multi_processor_count) == (
        dev.name, *dev.capability, dev.sm_count)
    assert torch.cuda.can_device_access_peer(0, 1) is dev.peer_access


def test_the_sm120_device_is_the_workstation_card():
    d = DEVICES["rtx-pro-6000"]
    assert (d.capability, d.name, d.total_mib, d.link, d.peer_access) == (
        (12, 0), "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97_887, "PCIe", False)


def test_definitions_runs_only_the_named_code(pristine_tree):
    got = loader.definitions(pristine_tree, "sglang.srt.configs.model_config",
                             ["_hf_arch"], {"Optional": None})
    assert got["_hf_arch"]({"architectures": ["A", "B"]}) == "A"
    with pytest.raises(KeyError, match="no_such_name"):
        loader.definitions(pristine_tree, "sglang.srt.configs.model_config", ["no_such_name"], {})


def test_installed_leaves_nothing_behind(pristine_tree):
    before = list(sys.meta_path)
    with loader.installed(pristine_tree, ["sglang.srt.multiplex.pdmux_context"], {"x_fake": 1}) as f:
        assert f in sys.meta_path
        assert loader.load("sglang.srt.multiplex.pdmux_context").get_arch_constraints((9, 0)) == (8, 8)
    assert sys.meta_path == before
    assert not [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]
    assert loader.StubRegistry.fakes == {}
