"""The ledger against the allocator (tools/gpu/e2e_pools.py) and the allocation probe
(tools/gpu/probe) on CPU.  The ledger is the one the patched tree wrote on the H200 for
dflash-smoke (2026-12-01); the pool records are built from the allocation shapes in
sglang/srt/mem_cache/memory_pool.py at v0.5.12.post1 (the release that ledger ran on) for that model and those flags
(Qwen3.6-27B: 48 Gated DeltaNet + 16 attention layers; 24 Mamba slots, 4 requests,
3,079 KV tokens, page 1, 16 draft tokens), computed here from the config, not from the
ledger."""
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.gpu.e2e_script import PROBE_DIR, pools, probe

DATA = Path(__file__).parent / "data" / "h200-2026-12-01"

# the model (tests/plan/data/qwen3.6-27b, -dflash)
LIN, ATT, DRAFT_LAYERS = 48, 16, 5
HV, DK, DV, NK, CONV_K = 48, 128, 128, 16, 4
KV_HEADS, HEAD = 4, 256
D_KV_HEADS, D_HEAD = 8, 128
TOKENS, SLOTS, REQS, DRAFT_TOKENS = 3079, 24, 4, 16


def smoke_pools():
    conv_dim = NK * DK * 2 + HV * DV                       # q, k and v through the conv
    conv = LIN * (SLOTS + 1) * conv_dim * (CONV_K - 1) * 2  # bf16
    temporal = LIN * (SLOTS + 1) * HV * DK * DV * 4         # float32 (mamba_ssm_dtype)
    inter_ssm = LIN * (REQS + 1) * DRAFT_TOKENS * HV * DK * DV * 4
    inter_conv = LIN * (REQS + 1) * DRAFT_TOKENS * conv_dim * (CONV_K - 1) * 2
    kv = (TOKENS + 1) * KV_HEADS * HEAD * 2 * ATT           # per buffer (K or V), bf16, page 1
    dkv = (TOKENS + 1) * D_KV_HEADS * D_HEAD * 2 * DRAFT_LAYERS
    return [
        {"wrapped": "MambaPool", "draft": False, "tensor_bytes": {
            "mamba_cache.conv": conv, "mamba_cache.temporal": temporal, "mamba_cache.intermediate_ssm": inter_ssm,
            "mamba_cache.intermediate_conv_window": inter_conv, "free_slots": 8 * SLOTS}},
        {"wrapped": "MHATokenToKVPool", "draft": False, "tensor_bytes": {"k_buffer": kv, "v_buffer": kv, "data_ptrs": 256}},
        {"wrapped": "MHATokenToKVPool", "draft": True, "tensor_bytes": {"k_buffer": dkv, "v_buffer": dkv}},
    ]


def test_recorded_ledger_against_the_allocation_shapes():
    ledger = json.loads((DATA / "dflash-smoke.patched.ledger.json").read_text())
    rows = {r["name"]: r for r in pools.compare(ledger, smoke_pools())}
    assert set(rows) == {"kv_cache", "draft_kv", "mamba_states", "speculative_intermediate_states"}
    assert rows["mamba_states"]["equal"] and rows["speculative_intermediate_states"]["equal"]
    # the KV pools hold one padded page (slot 0) beyond this (older) ledger's tokens x cell
    # (written by the stack of cc62f5daf374; since then the ledger states the padded cells)
    assert rows["kv_cache"]["diff"] == 65536 and "1 KV cell(s) of 65536 B" in rows["kv_cache"]["note"]
    assert rows["draft_kv"]["diff"] == 20480 and not rows["draft_kv"]["equal"]
    assert "kv_cache: ledger 201785344 B, allocated 201850880 B" in pools.summary(list(rows.values()))


def test_pool_missing_from_the_ledger_and_the_other_way_round():
    rows = {r["name"]: r for r in pools.compare({"reservations": {"kv_cache": {"bytes": 10}}},
                                                [{"wrapped": "MambaPool", "draft": None,
                                                  "tensor_bytes": {"mamba_cache.conv": 4, "mamba_cache.temporal": 4}}])}
    assert rows["kv_cache"]["note"] == "in the ledger, no such pool allocated" and not rows["kv_cache"]["equal"]
    assert rows["mamba_states"]["note"] == "allocated, not in the ledger" and rows["mamba_states"]["allocated_bytes"] == 8


def test_probe_in_a_server_like_process(tmp_path):
    """sitecustomize on PYTHONPATH + SGLO_E2E_PROBE: a process importing modules of the
    probed names gets its pools and free-memory readings recorded (the modules here
    are constructed stand-ins with SGLang's attribute layout, on CPU tensors)."""
    pkg = tmp_path / "src" / "sglang" / "srt"
    (pkg / "mem_cache").mkdir(parents=True)
    (pkg / "utils").mkdir()
    for d in (pkg.parent, pkg, pkg / "mem_cache", pkg / "utils"):
        (d / "__init__.py").write_text("")
    (pkg / "mem_cache" / "memory_pool.py").write_text(
        "import torch\nfrom dataclasses import dataclass\n"
        "@dataclass(frozen=True, kw_only=True)\nclass State:\n    conv: list\n    temporal: torch.Tensor\n"
        "class MambaPool:\n    def __init__(self, size):\n        self.size = size\n"
        "        self.mamba_cache = State(conv=[torch.zeros(2, size + 1, 3, dtype=torch.bfloat16)],"
        " temporal=torch.zeros(2, size + 1, 4, 4))\n"
        "        self.free_slots = torch.arange(1, size + 1)\n"
        "class MHATokenToKVPool:\n    def __init__(self, size):\n        self.size = size\n"
        "        self.k_buffer = [torch.zeros(size + 1, 2, 8) for _ in range(3)]\n"
        "        self.v_buffer = [torch.zeros(size + 1, 2, 8) for _ in range(3)]\n"
        "        self.view = self.k_buffer[0][1:]\n")
    (pkg / "utils" / "common.py").write_text("def get_available_gpu_memory(device, gpu_id):\n    return 93.63592529296875\n")
    user = ("from sglang.srt.utils.common import get_available_gpu_memory\n"
            "from sglang.srt.mem_cache.memory_pool import MambaPool, MHATokenToKVPool\n"
            "class ModelRunner:\n    def __init__(self, draft):\n        self.is_draft_worker = draft\n"
            "        get_available_gpu_memory('cuda', 0)\n"
            "        self.pool = MHATokenToKVPool(10) if draft else MambaPool(5)\n"
            "ModelRunner(False); ModelRunner(True)\n")
    out = tmp_path / "probe"
    env = dict(os.environ, PYTHONPATH=f"{PROBE_DIR}:{tmp_path / 'src'}", SGLO_E2E_PROBE=str(out))
    subprocess.run([sys.executable, "-c", user], env=env, check=True)
    (f,) = out.glob("probe.*.json")
    d = json.loads(f.read_text())
    mamba, kv = d["pools"]
    assert (mamba["wrapped"], mamba["draft"], mamba["size"]) == ("MambaPool", False, 5)
    assert mamba["tensor_bytes"] == {"mamba_cache.conv": 2 * 6 * 3 * 2, "mamba_cache.temporal": 2 * 6 * 16 * 4,
                                     "free_slots": 5 * 8}
    assert (kv["wrapped"], kv["draft"]) == ("MHATokenToKVPool", True)
    assert kv["tensor_bytes"] == {"k_buffer": 3 * 11 * 16 * 4, "v_buffer": 3 * 11 * 16 * 4}   # the view adds nothing
    assert [(r["bytes"], r["caller"], r["draft"]) for r in d["free_readings"]] == [(100540809216, "__init__", False),
                                                                                   (100540809216, "__init__", True)]
    # without the variable, nothing is wrapped and nothing is written
    env.pop("SGLO_E2E_PROBE")
    subprocess.run([sys.executable, "-c", user], env=env, check=True, cwd=tmp_path)
    assert len(list(out.glob("probe.*.json"))) == 1


def test_tensor_bytes_counts_each_storage_once():
    import torch
    t = torch.zeros(10, 4)
    assert probe.tensor_bytes([t, t[2:], [t]]) == 160


def test_native_ops_only_when_asked(tmp_path):
    """SGLO_E2E_NATIVE_OPS: an op with its own forward_native dispatches to it; an op without
    one keeps its CUDA forward; without the variable nothing changes (stand-in module with
    MultiPlatformOp's dispatch: __init__ stores dispatch_forward())."""
    d = tmp_path / "src" / "sglang" / "srt" / "layers" / "utils"
    d.mkdir(parents=True)
    for p in (d, d.parent, d.parent.parent, d.parent.parent.parent):
        (p / "__init__.py").write_text("")
    (d / "multi_platform.py").write_text(
        "class MultiPlatformOp:\n    def __init__(self):\n        self._forward_method = self.dispatch_forward()\n"
        "    def dispatch_forward(self):\n        return self.forward_cuda\n"
        "    def forward_native(self):\n        raise NotImplementedError\n"
        "    def forward_cuda(self):\n        return 'cuda'\n")
    user = ("from sglang.srt.layers.utils.multi_platform import MultiPlatformOp as M\n"
            "class Norm(M):\n    def forward_native(self):\n        return 'native'\n"
            "class Other(M):\n    pass\n"
            "print(Norm()._forward_method(), Other()._forward_method())\n")
    base = dict(os.environ, PYTHONPATH=f"{PROBE_DIR}:{tmp_path / 'src'}", SGLO_E2E_PROBE=str(tmp_path / "p"))
    on = subprocess.run([sys.executable, "-c", user], env=dict(base, SGLO_E2E_NATIVE_OPS="1"), capture_output=True,
                        text=True, check=True)
    off = subprocess.run([sys.executable, "-c", user], env=base, capture_output=True, text=True, check=True)
    assert on.stdout.split() == ["native", "cuda"]
    assert off.stdout.split() == ["cuda", "cuda"]


def test_h200_16_ledger_equals_the_gpus_pools():
    """h200-16 (2026-12-01, case over_budget): the probe's records of the pools the GPU built
    against the patched tree's ledger: every reservation equal to the byte."""
    ledger = json.loads((DATA / "h200-16.patched.ledger.json").read_text())
    rows = pools.compare(ledger, json.loads((DATA / "h200-16.patched.pools.json").read_text()))
    assert {r["name"] for r in rows} == {"kv_cache", "draft_kv", "mamba_states", "speculative_intermediate_states"}
    assert pools.equal(rows), rows


def test_dense_fits_case_on_the_gpu_allocates_the_padding_page():
    """The dense float32 start-up of 2026-12-01 (case fits, the stack before the ledger stated the
    padding page): the GPU's pool is (tokens + page_size) cells, the ledger then said tokens cells;
    the ledger now reserves (tokens + page_size) x cell (budget-ledger.patch, tests/memory/test_allocation.py)."""
    rec = json.loads((DATA / "dense.patched.base.eager.float32.ledger-and-pools.json").read_text())
    fig = rec["ledger"]["figures"]
    assert fig["case"] == "fits"
    (row,) = [r for r in pools.compare(rec["ledger"], rec["pools"]) if r["name"] == "kv_cache"]
    cell, tokens, page = fig["target_cell_size_bytes"], fig["max_total_num_tokens"], fig["page_size"]
    assert row["ledger_bytes"] == tokens * cell and row["diff"] == page * cell == 8192
    assert row["allocated_bytes"] == (tokens + page) * cell


# the pin (v0.5.17) on the H200, 2026-12-03 (tests/data/gpu_results/2026-12-03; docs/results/gpu.md)
PIN = Path(__file__).parents[1] / "data" / "gpu_results" / "2026-12-03"


def _pin_runs(part):
    d = json.loads((PIN / part / "e2e.json").read_text())
    if part == "lossless":
        return {r["id"]: r for r in d["lossless"]["runs"] if r.get("probe")}
    return {f"{c['name']}.{k}": r for c in d["cases"] for k, r in c["runs"].items() if r.get("probe")}


def test_v0_5_17_keeps_the_conv_windows_in_a_physical_buffer_the_ledger_counts():
    """DDTREE (tree verify: v0.5.17 keeps the dense [D, K-1] window per draft token) on the hybrid
    model: the conv windows' storage is the pool's `_intermediate_conv_window_phys`; with it the
    speculative intermediate states equal the ledger to the byte, without it they are short by it."""
    r = _pin_runs("lossless")["hybrid.patched.ddtree.graphs"]
    (mamba,) = [p for p in r["probe"]["pools"] if p["wrapped"] == "MambaPool"]
    # the model (tools/gpu/e2e_models.py): 3 Gated DeltaNet layers, 2 key heads and 4 value heads of 128,
    # conv kernel 4, float32 conv states; 32 slots + 1 padding, 16 draft tokens
    conv_dim = 2 * 128 * 2 + 4 * 128
    assert mamba["tensor_bytes"]["_intermediate_conv_window_phys"] == 3 * 33 * 16 * conv_dim * (4 - 1) * 4
    rows = {x["name"]: x for x in pools.compare(r["ledger_raw"], r["probe"]["pools"])}
    assert pools.equal(list(rows.values())), rows
    without = [dict(p, tensor_bytes={k: v for k, v in p["tensor_bytes"].items()
                                     if k != "_intermediate_conv_window_phys"}) for p in r["probe"]["pools"]]
    short = {x["name"]: x for x in pools.compare(r["ledger_raw"], without)}["speculative_intermediate_states"]
    assert short["diff"] == -mamba["tensor_bytes"]["_intermediate_conv_window_phys"]


def test_v0_5_17_over_reserves_the_deduplicated_conv_windows_of_a_linear_chain():
    """DFLASH (a linear draft chain) on the 27B shape: v0.5.17's MambaPool stores one shared
    [conv_dim, D + K - 2] window per layer and slot (conv_window_dedup_enabled), but its sizing
    reserves D x mamba_cache_per_req per slot, the dense D x (K - 1) columns: the ledger, which
    states the sizing's reservation, is over the allocation by slots x (D(K-1) - (D+K-2)) columns.
    An open difference (docs/results/gpu.md), asserted here so that a change to it is seen."""
    col = LIN * (NK * DK * 2 + HV * DV) * 2                  # one conv column, every layer, bf16
    runs = _pin_runs("cases")
    for run, slots in (("dflash-smoke-raised.patched+remedy", 3), ("zero-requests-dflash.patched+remedy", 5)):
        r = runs[run]
        (mamba,) = [p for p in r["probe"]["pools"] if p["wrapped"] == "MambaPool"]
        assert mamba["tensor_bytes"]["_intermediate_conv_window_phys"] == slots * (DRAFT_TOKENS + CONV_K - 2) * col
        rows = {x["name"]: x for x in pools.compare(r["ledger_raw"], r["probe"]["pools"])}
        assert all(rows[n]["equal"] for n in ("kv_cache", "draft_kv", "mamba_states")), rows
        over = rows["speculative_intermediate_states"]
        assert r["ledger_raw"]["reservations"]["speculative_intermediate_states"]["slots"] == slots
        assert -over["diff"] == slots * (DRAFT_TOKENS * (CONV_K - 1) - (DRAFT_TOKENS + CONV_K - 2)) * col


def test_with_the_conv_windows_reserved_as_allocated_the_ledger_equals_the_gpus_pools():
    """The same cases on the H200 with memory-reserve-the-speculative-conv-windows.patch
    (2026-12-03, cases-conv-windows): every reservation of every started run equal to the byte."""
    d = json.loads((PIN / "cases-conv-windows" / "e2e.json").read_text())
    started = [r for c in d["cases"] for r in c["runs"].values() if r.get("healthy")]
    assert len(started) == 2
    for r in started:
        rows = pools.compare(r["ledger_raw"], r["probe"]["pools"])
        assert {x["name"] for x in rows} == {"kv_cache", "draft_kv", "mamba_states", "speculative_intermediate_states"}
        assert pools.equal(rows), rows
