"""patches/sm120-communication.patch: torch symmetric-memory all-reduce and
FlashInfer all-reduce fusion on compute capability 12.x."""
import logging
import types

import pytest
import torch

from .support import CONTROLS, SM120, both_trees, describe, model_adjustments, pristine_fails

MiB = 1 << 20
SYMM_MEM = "sglang.srt.distributed.device_communicators.torch_symm_mem"
SYMM_MEM_MODULES = [SYMM_MEM, "sglang.srt.distributed.device_communicators.all_reduce_utils"]
TP = 8  # one host, 8 GPUs


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
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: TP)
    with on_device(tree, device_key, SYMM_MEM_MODULES) as load:
        mod = load(SYMM_MEM)
        fake = FakeSymmMem()
        monkeypatch.setattr(mod, "torch_symm_mem", fake)
        monkeypatch.setattr(mod, "torch_symm_mem_available", True)
        comm = mod.TorchSymmMemCommunicator(types.SimpleNamespace(group_name="tp"), 0)
        return comm, fake.allocated


@pristine_fails(KeyError, "the pin looks capability major 12 up in TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES "
                          "(keys 9, 10): KeyError: 12 at start-up")
def test_torch_symm_mem_on_sm120_refuses_clearly(sglang_tree, on_device, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    comm, allocated = symm_mem_communicator(on_device, sglang_tree, SM120, monkeypatch)
    assert comm.disabled is True and allocated == []
    assert comm.should_torch_symm_mem_allreduce(torch.zeros(4, dtype=torch.bfloat16)) is False
    message = " ".join(r.getMessage() for r in caplog.records if r.name == SYMM_MEM)
    assert "compute capability 12.x" in message and "majors [9, 10]" in message
    assert "NVLink multicast" in message


@pytest.mark.parametrize("device_key", CONTROLS)
def test_torch_symm_mem_controls_unchanged(device_key, pristine_tree, patched_tree, on_device, monkeypatch):
    got = {}
    for name, tree in both_trees(pristine_tree, patched_tree).items():
        comm, allocated = symm_mem_communicator(on_device, tree, device_key, monkeypatch)
        got[name] = (comm.disabled, comm.max_size, allocated)
    # 128 MiB for 8 GPUs on both 9.x and 10.x; bf16 buffer of max_size / 2 elements
    assert got["pristine"] == got["patched"] == (False, 128 * MiB, [64 * MiB])


def test_symm_mem_multimem_table_has_no_key_the_size_table_lacks(patched_tree, on_device):
    """The patch leaves _WORLD_SIZES_MULTIMEM alone: it is read only by an
    enabled communicator, i.e. for a major that has a size table."""
    with on_device(patched_tree, SM120, SYMM_MEM_MODULES) as load:
        mod = load(SYMM_MEM)
        sizes = load("sglang.srt.distributed.device_communicators.all_reduce_utils")
        assert set(mod.TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM) <= set(
            sizes.TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES) == {9, 10}


# ---- FlashInfer all-reduce fusion -------------------------------------------

FUSION_MODEL = "Qwen3MoeForCausalLM"  # on the pin's auto-enable list


def fusion_flag(on_device, tree, device_key, explicit):
    out = model_adjustments(on_device, tree, device_key, FUSION_MODEL, tp_size=TP,
                            enable_flashinfer_allreduce_fusion=explicit)
    assert not isinstance(out, Exception), out
    return out["enable_flashinfer_allreduce_fusion"]


@pristine_fails(AssertionError, "the pin keeps an explicit --enable-flashinfer-allreduce-fusion on SM12x "
                                "(model_runner pre-initialises FlashInfer's workspace; never used)")
def test_flashinfer_fusion_flag_is_turned_off_on_sm120(sglang_tree, on_device, caplog):
    caplog.set_level(logging.WARNING)
    assert fusion_flag(on_device, sglang_tree, SM120, explicit=True) is False
    assert any("--enable-flashinfer-allreduce-fusion" in r.getMessage()
               and "SM90 and SM100 only" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("device_key", CONTROLS)
@pytest.mark.parametrize("explicit", [True, False])
def test_flashinfer_fusion_controls_unchanged(device_key, explicit, pristine_tree, patched_tree, on_device):
    got = {n: fusion_flag(on_device, t, device_key, explicit)
           for n, t in both_trees(pristine_tree, patched_tree).items()}
    assert got == {"pristine": True, "patched": True}  # explicit, or auto-enabled on SM90/SM100


def test_flashinfer_fusion_is_not_auto_enabled_on_sm120_in_either_tree(pristine_tree, patched_tree, on_device):
    assert [fusion_flag(on_device, t, SM120, explicit=False) for t in (pristine_tree, patched_tree)] == [
        False, False]


@pytest.mark.parametrize("device_key,fuses", [(SM120, False), ("h200", True), ("b200", True)])
def test_communicator_never_fuses_on_sm120(device_key, fuses, pristine_tree, patched_tree, on_device):
    """layers/communicator.py (not patched): with the flag on, fusion is applied
    on SM90/SM100 only. This is why an SM12x flag can only be turned off."""
    server_args = types.SimpleNamespace(enable_flashinfer_allreduce_fusion=True)
    got = []
    for tree in (pristine_tree, patched_tree):
        with on_device(tree, device_key, ["sglang.srt.layers.communicator"],
                       get_global_server_args=lambda: server_args) as load:
            got.append(describe(load("sglang.srt.layers.communicator").apply_flashinfer_allreduce_fusion(16)))
    assert got == [fuses, fuses]
