"""patches/sm120-communication.patch: FlashInfer all-reduce fusion on compute
capability 12.x, and what the pin already does for torch symmetric-memory
all-reduce there (the patch's other half, dropped at v0.5.17).

The start-up flags go through the pin's own ServerArgs resolution (the
harness, support.resolved): TP 2 on the simulated device."""
import logging
import types

import pytest
import torch

from sgl_overlay import release_trees

from .support import CONTROLS, SM120, SM121, resolved

MiB = 1 << 20
TP = 2
FUSION = "flashinfer_allreduce_fusion_backend"


# ---- FlashInfer all-reduce fusion ---------------------------------------------

def fusion_backend(tree, device_key, **flags):
    """The resolved fusion backend and the rule that set it last ((None, None):
    no rule changed the flag given)."""
    got = resolved(tree, device_key, tp=TP, **flags)
    return got.get(FUSION, (flags.get(FUSION), None))


@pytest.mark.parametrize("device_key", [SM120, SM121])
def test_fusion_backend_is_turned_off_on_sm12x(device_key, pristine_tree, patched_tree):
    """--enable-flashinfer-allreduce-fusion: the pin maps it to backend "auto"
    (_handle_deprecated_args) and keeps it on 12.x, where the runner's workspace
    pre-initialisation then refuses (test below); the patch leaves it off."""
    assert fusion_backend(pristine_tree, device_key, enable_flashinfer_allreduce_fusion=True) == (
        "auto", "ServerArgs._handle_deprecated_args")
    assert fusion_backend(patched_tree, device_key, enable_flashinfer_allreduce_fusion=True) == (None, None)


def test_explicit_fusion_backend_is_turned_off_on_sm120(pristine_tree, patched_tree, caplog):
    caplog.set_level(logging.WARNING)
    assert fusion_backend(pristine_tree, SM120, **{FUSION: "trtllm"}) == ("trtllm", None)
    assert fusion_backend(patched_tree, SM120, **{FUSION: "trtllm"}) == (None, "_sm120_allreduce_fusion_disable")


@pytest.mark.parametrize("device_key", CONTROLS)
@pytest.mark.parametrize("flags", [dict(enable_flashinfer_allreduce_fusion=True), {FUSION: "trtllm"}],
                         ids=["deprecated-flag", "explicit-backend"])
def test_fusion_controls_unchanged(device_key, flags, pristine_tree, patched_tree):
    got = [fusion_backend(t, device_key, **flags) for t in (pristine_tree, patched_tree)]
    assert got[0] == got[1] and got[0][0] in ("auto", "trtllm"), got


def test_fusion_is_not_auto_enabled_on_sm120_in_either_tree(pristine_tree, patched_tree):
    """The automatic enabling (SM90/SM100 only, for the models on its list) was
    never the problem; Olmo2 is not on its list, so nothing is set anywhere."""
    assert [fusion_backend(t, SM120) for t in (pristine_tree, patched_tree)] == [(None, None)] * 2


def test_fusion_on_sm120_fails_late_on_the_pin(pristine_tree, on_device):
    """Why the backend must not stay on: the pin's own backend check, which the
    runner reaches when it pre-initialises the fusion workspace (TP >= 2),
    refuses SM12x."""
    module = "sglang.srt.layers.flashinfer_comm_fusion"
    with on_device(pristine_tree, SM120, [module]) as load:
        with pytest.raises(ValueError, match="requires SM90 or SM10X"):
            load(module)._resolve_backend("auto", False)


@pytest.mark.parametrize("device_key,fuses", [(SM120, False), ("h200", True), ("b200", True)])
def test_communicator_never_fuses_on_sm120(device_key, fuses, pristine_tree, patched_tree, on_device):
    """layers/communicator.py (not patched): with a backend set, fusion is applied
    on SM90/SM100 only. This is why an SM12x backend can only be turned off."""
    comm = types.SimpleNamespace(flashinfer_allreduce_fusion_backend="auto")
    got = []
    for tree in (pristine_tree, patched_tree):
        with on_device(tree, device_key, ["sglang.srt.layers.communicator"],
                       get_exec=lambda: types.SimpleNamespace(comm=comm),
                       is_dp_attention_enabled=lambda: False,
                       is_flashinfer_allreduce_unavailable=lambda: False) as load:
            got.append(load("sglang.srt.layers.communicator").apply_flashinfer_allreduce_fusion(16))
    assert got == [fuses, fuses]


# ---- torch symmetric-memory all-reduce (the half upstream covers) --------------

SYMM_MEM = "sglang.srt.distributed.device_communicators.torch_symm_mem"
SYMM_MEM_MODULES = [SYMM_MEM, "sglang.srt.distributed.device_communicators.all_reduce_utils"]
SYMM_TP = 8  # one host, 8 GPUs


class FakeSymmMem:
    """torch.distributed._symmetric_memory in place of real allocations; the
    NVLink controls (HGX H200 / B200) have multicast."""

    def __init__(self):
        self.allocated = []

    def empty(self, numel, device, dtype):
        self.allocated.append(numel)
        return torch.empty(0, dtype=dtype)

    def rendezvous(self, buffer, group_name):
        return types.SimpleNamespace(multicast_ptr=1)


def symm_mem_communicator(on_device, tree, device_key, monkeypatch):
    """Construct TorchSymmMemCommunicator as parallel_state does for a TP group
    of 8 under --enable-torch-symm-mem; return (communicator, allocations)."""
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: SYMM_TP)
    comm = types.SimpleNamespace(enable_scattered_sconv=False)  # --enable-scattered-sconv unset
    with on_device(tree, device_key, SYMM_MEM_MODULES, get_exec=lambda: types.SimpleNamespace(comm=comm)) as load:
        mod = load(SYMM_MEM)
        fake = FakeSymmMem()
        monkeypatch.setattr(mod, "torch_symm_mem", fake)
        monkeypatch.setattr(mod, "torch_symm_mem_available", True)
        comm = mod.TorchSymmMemCommunicator(types.SimpleNamespace(group_name="tp"), 0)
        return comm, fake.allocated


def test_symm_mem_declines_sm120_on_the_pin(pristine_tree, patched_tree, on_device, monkeypatch, caplog):
    """69b02ea68a (#24548, v0.5.14) looks the size table up with .get(): the pin
    stays disabled on SM12x with a warning, allocating nothing (the reason the
    patch's KeyError half was dropped)."""
    caplog.set_level(logging.WARNING)
    for tree in (pristine_tree, patched_tree):
        caplog.clear()
        comm, allocated = symm_mem_communicator(on_device, tree, SM120, monkeypatch)
        assert (comm.disabled, comm.max_size, allocated) == (True, 0, [])
        assert comm.should_torch_symm_mem_allreduce(torch.zeros(4, dtype=torch.bfloat16)) is False
        assert any("Device capability 12 not supported" in r.getMessage() for r in caplog.records)


def test_symm_mem_keyerror_on_sm120_at_v0_5_12_post1(on_device, monkeypatch):
    """What the dropped half was for: v0.5.12.post1 (the pin until v0.5.17)
    looked capability major 12 up in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES
    (keys 9, 10): KeyError: 12 at start-up."""
    with pytest.raises(KeyError, match="12"):
        symm_mem_communicator(on_device, release_trees.release_tree("0.5.12.post1"), SM120, monkeypatch)


def test_the_dropped_half_declined_sm120_at_v0_5_12_post1(on_device, patched_tree_of, monkeypatch):
    """The release matrix: the stack this repository kept for v0.5.12.post1 (tests/conftest.py
    EARLIER_PINS, sm120-communication.patch with its KeyError half) starts the communicator on SM12x
    disabled, allocating nothing, where the release alone raises KeyError: 12 (the test above)."""
    comm, allocated = symm_mem_communicator(on_device, patched_tree_of("0.5.12.post1"), SM120, monkeypatch)
    assert (comm.disabled, allocated) == (True, [])
    assert comm.should_torch_symm_mem_allreduce(torch.zeros(4, dtype=torch.bfloat16)) is False


@pytest.mark.parametrize("device_key", CONTROLS)
def test_torch_symm_mem_controls_unchanged(device_key, pristine_tree, patched_tree, on_device, monkeypatch):
    got = {}
    for name, tree in (("pristine", pristine_tree), ("patched", patched_tree)):
        comm, allocated = symm_mem_communicator(on_device, tree, device_key, monkeypatch)
        got[name] = (comm.disabled, comm.max_size, allocated)
    # the size table's 128 MiB for 8 GPUs (9.x and 10.x alike), raised to 512 MiB by
    # the pin's Inkling all-reduce defaults (SGLANG_OPT_USE_INKLING_CUSTOM_AR and
    # SGLANG_OPT_USE_INKLING_FUSED_AR_SCONV on: the fused extend kernels' output
    # holds the largest prefill payload); a bf16 buffer of max_size / 2 elements
    assert got["pristine"] == got["patched"] == (False, 512 * MiB, [256 * MiB])
