"""A simulated GPU for the sm120 patch tests, and the pinned SGLang on it
(the fixtures that use this are in conftest.py).

No GPU here: each test picks one of four devices and the few ``torch.cuda``
queries the code under test makes answer for it.  The SM120 device is the
one the patches are for (GB10, 12.1, where a 12.0-only check misses it);
H200 (9.0) and B200 (10.0) are the controls, with their real figures
(nvidia-smi's ``memory.total``, the SM count).

Start-up flags are resolved by the release's own ServerArgs rules through
the regression harness (``resolved``: its resolution pipeline, model
overrides and post-process passes, on a scenario whose ``[gpu]`` is the
simulated device); single modules are loaded on the simulated device
(conftest.py ``on_device``).

SGLang's own capability helpers (``is_sm120_supported``, ``is_blackwell``,
``get_device_sm`` ...) live in ``sglang/srt/utils/common.py``, which cannot be
imported here (orjson, triton, starlette ...).  They are not restated: each
tree's own definitions are executed (``loader.definitions``) against the
simulated ``torch.cuda`` and handed to the modules under test, which are
loaded from the tree the harness's targeted way (``loader.installed``; every
other ``sglang`` module is an inert stand-in).
"""
from __future__ import annotations

import dataclasses
import sys
import types
from functools import lru_cache, partial
from pathlib import Path
from typing import List, Optional, Tuple

import pytest
import torch

from sgl_overlay.harness.child import loader



@dataclasses.dataclass(frozen=True)
class Device:
    name: str                   # torch.cuda.get_device_name()
    capability: tuple           # torch.cuda.get_device_capability()
    total_mib: Optional[int]    # nvidia-smi memory.total (what SGLang's get_device_memory_capacity
                                # reads; torch's total_memory is lower, e.g. 143,155 MiB on an H200)
    sm_count: int               # multi_processor_count
    link: str                   # how the GPUs of one host are connected
    peer_access: bool           # torch.cuda.can_device_access_peer between two of them

    def properties(self):
        major, minor = self.capability
        return types.SimpleNamespace(name=self.name, major=major, minor=minor,
                                     multi_processor_count=self.sm_count)


DEVICES = {
    "rtx-pro-6000": Device("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0), 97_887, 188,
                           "PCIe", False),
    "h200": Device("NVIDIA H200", (9, 0), 143_771, 132, "NVLink", True),
    "b200": Device("NVIDIA B200", (10, 0), 183_359, 148, "NVLink", True),
    # DGX Spark's GB10 (compute capability 12.1, 48 SMs: public figures, not
    # measured here); its memory is unified with the CPU's, and no test that
    # takes this device reads memory.total (None)
    "gb10": Device("NVIDIA GB10", (12, 1), None, 48, "NVLink-C2C", False),
}
SM120 = "rtx-pro-6000"
SM121 = "gb10"
CONTROLS = ("h200", "b200")

# torch.version.cuda on the simulated machine (chosen: the pin's torch 2.11.0
# with the CUDA 13 stack its release requires, cuda-python>=13.0; every
# capability helper involved only asks for >= 12.3 or >= 12.8).
TORCH_CUDA = "13.0"

# Upstream helpers taken from each tree's own source (run in the file's order).
COMMON_HELPERS = [
    "is_hip", "is_cuda", "is_musa", "_check_cuda_device_version", "is_ampere_with_cuda_12_3",
    "is_hopper_with_cuda_12_3", "is_blackwell_supported", "is_blackwell", "is_sm120_supported",
    "is_sm100_supported", "is_sm90_supported", "get_device_sm", "get_device_capability",
    "get_device_name", "get_quantization_config",
]
MODEL_CONFIG_HELPERS = ["_hf_arch", "_hf_attr", "is_deepseek_nsa", "get_nsa_index_topk"]
# From v0.5.2x DeepSeek sparse attention is "DSA" in the names (v0.5.23: is_deepseek_dsa).
MODEL_CONFIG_HELPERS_DSA = ["_hf_arch", "_hf_attr", "is_deepseek_dsa", "get_dsa_index_topk"]


def simulate(monkeypatch, dev: Device) -> None:
    """The torch.cuda queries the code under test makes, answered for ``dev``
    (one GPU of the host, index 0)."""
    cuda = torch.cuda
    monkeypatch.setattr(torch.version, "cuda", TORCH_CUDA)
    monkeypatch.setattr(cuda, "is_available", lambda: True)
    monkeypatch.setattr(cuda, "current_device", lambda: 0)
    monkeypatch.setattr(cuda, "set_device", lambda device=None: None)
    monkeypatch.setattr(cuda, "get_device_capability", lambda device=None: dev.capability)
    monkeypatch.setattr(cuda, "get_device_name", lambda device=None: dev.name)
    monkeypatch.setattr(cuda, "get_device_properties", lambda device=None: dev.properties())
    monkeypatch.setattr(cuda, "can_device_access_peer", lambda device, peer: dev.peer_access)


def tree_helpers(root) -> dict:
    """The tree's own capability helpers, fresh (their lru_caches start empty)."""
    ns = {"torch": torch, "lru_cache": lru_cache, "partial": partial, "List": List,
          "Tuple": Tuple, "Optional": Optional, "PretrainedConfig": object,  # (annotations)
          # v0.5.2x's get_device_sm asks NVML first and falls back to torch.cuda
          # when it cannot answer, as without pynvml (not installed here)
          "_get_device_sm_via_nvml": lambda: None}
    out = loader.definitions(root, "sglang.srt.utils.common", COMMON_HELPERS, ns)
    try:
        out.update(loader.definitions(root, "sglang.srt.configs.model_config", MODEL_CONFIG_HELPERS, ns))
    except KeyError:  # a tree of the DSA naming
        out.update(loader.definitions(root, "sglang.srt.configs.model_config", MODEL_CONFIG_HELPERS_DSA, ns))
    # FlashInfer is a pinned dependency of the release (flashinfer_python
    # 0.6.11.post1); its presence is what is_flashinfer_available() checks.
    out["is_flashinfer_available"] = lambda: True
    return out


def pristine_fails(raises, reason):
    """Run the test on both trees; on the pristine pin it must fail (strict
    xfail) with ``raises``: the bug reproduced. On the patched tree it must pass."""
    return pytest.mark.parametrize("sglang_tree", [
        pytest.param("pristine", marks=pytest.mark.xfail(strict=True, raises=raises, reason=reason)),
        "patched",
    ], indirect=True)


def both_trees(pristine_tree, patched_tree):
    return {"pristine": pristine_tree, "patched": patched_tree}


def outcome(fn):
    """fn()'s result, or the exception it raised (as a value, for comparing trees)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the outcome is the subject of the test
        return e


def describe(value):
    """Comparable form of an outcome: exceptions by type and message."""
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    return value


# ---- start-up flags through the release's own resolution -------------------

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "olmo2-rtx-pro-6000.toml"


def resolved(tree, device_key=SM120, tp=1, **flags):
    """The scenario (Olmo2-7B, default flags) on ``device_key`` x ``tp`` with
    ``flags``, resolved by ``tree``'s own ServerArgs rules (the harness):
    {flag: (resolved value, rule)} for every flag a rule changed."""
    from sgl_overlay.harness import Outcome, load_scenario, run_scenario

    sc = load_scenario(str(SCENARIO))
    dev = DEVICES[device_key]
    gpu = dict(sc.gpu, device_name=dev.name, capability=list(dev.capability), total_mib=dev.total_mib,
               world_size=tp)
    if tp > 1:  # the weights are split over the TP group
        gpu.update(weights_gib=sc.gpu["weights_gib"] / tp,
                   post_load_free_gib=sc.gpu["pre_load_free_gib"] - sc.gpu["weights_gib"] / tp)
    sc = dataclasses.replace(sc, gpu=gpu, server=dict(sc.server, tp_size=tp, **flags))
    report = run_scenario(tree, sc, verify_remedy=False)
    assert report.outcome is Outcome.OK, (report.outcome, report.reason)
    return {c["flag"]: (c["resolved"], c["rule"]) for c in report.figures["resolution"]}


# ---- PD multiplexing ---------------------------------------------------------

PDMUX = "sglang.srt.multiplex.pdmux_context"


def pdmux_stream_groups(on_device, tree, device_key, monkeypatch):
    """initialize_stream_groups(gpu 0, default PDMuxConfig) as --enable-pdmux runs
    it at start-up; sgl_kernel.spatial reports the device's SMs and hands out
    placeholder green-context streams. Returns SM_COUNTS or the exception."""
    dev = DEVICES[device_key]
    spatial = types.SimpleNamespace(get_sm_available=lambda gpu_id: dev.sm_count,
                                    create_greenctx_stream_by_value=lambda p, d, gpu_id: (object(), object()))
    monkeypatch.setitem(sys.modules, "sgl_kernel", types.SimpleNamespace(spatial=spatial))
    monkeypatch.setattr(torch.cuda, "Stream", lambda *a, **k: object())
    with on_device(tree, device_key, [PDMUX]) as load:
        mod = load(PDMUX)
        return describe(outcome(lambda: (mod.initialize_stream_groups(0, mod.PDMuxConfig()),
                                         list(mod.SM_COUNTS))[1]))


# SM_COUNTS (prefill SMs, decode SMs) for the default 8 groups: normal
# prefill, 6 green-context splits (prefill a multiple of 8, decode >= 16 SMs),
# normal decode. Worked out by hand from divide_sm for each device's SM count.
SPLITS = {
    188: [(188, 0), (136, 52), (128, 60), (120, 68), (112, 76), (104, 84), (96, 92), (0, 188)],
    148: [(148, 0), (120, 28), (112, 36), (104, 44), (96, 52), (88, 60), (80, 68), (0, 148)],
    132: [(132, 0), (112, 20), (104, 28), (96, 36), (88, 44), (80, 52), (72, 60), (0, 132)],
}
