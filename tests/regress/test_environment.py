"""The caller's SGLang settings (SGLANG_*): honoured by the harness as the server would, named in
its report, and kept out of the tests unless a test sets them (tests/conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path

from sgl_overlay.commands import regress as regress_cmd
from sgl_overlay.harness import Outcome, load_scenario, run_scenario
from sgl_overlay.harness.environment import describe, sglang_settings

from . import oracle

ROOT = Path(__file__).resolve().parents[2]

# A hybrid Gated-DeltaNet model with --disable-radix-cache and --max-running-requests 32: on the
# pin, handle_max_mamba_cache (model_runner_kv_cache_mixin.py) takes the Mamba slots from
# --max-running-requests, so the slot count does not move with the bytes of a slot, and what a
# slot gains comes out of the KV budget, slot by slot.
SCENARIO = "public-gb10-qwen38-27b-v0515"


def test_settings_are_the_sglang_variables_only():
    env = {"SGLANG_B": "2", "PATH": "/bin", "SGL_ENABLE_JIT_DEEPGEMM": "1", "SGLANG_A": "x y",
           "SGL_OVERLAY_CACHE": "/c", "SGLO_MEMORY_LEDGER": "/l", "XSGLANG_C": "3"}
    # SGL_ is SGLang's deprecated spelling (environ.py, every release); SGL_OVERLAY_* is ours
    assert list(sglang_settings(env).items()) == [("SGLANG_A", "x y"), ("SGLANG_B", "2"),
                                                  ("SGL_ENABLE_JIT_DEEPGEMM", "1")]
    assert sglang_settings({"HOME": "/root"}) == {}
    assert describe({}) is None
    assert describe({"SGLANG_A": "x y", "SGLANG_B": "2"}).startswith("environment: SGLANG_A='x y' SGLANG_B=2 ")


def test_mamba_conv_dtype_changes_the_pins_figures_by_what_its_code_implies(pristine_tree, monkeypatch):
    """SGLANG_MAMBA_CONV_DTYPE=float32 (configs/mamba_utils.py mamba2_state_dtype: the conv states'
    dtype, bfloat16 by default) doubles the conv part of every Mamba slot: conv_dim x (kernel - 1)
    more bytes x 2 per linear layer.  With the slots fixed at 32, the KV budget loses 33 of those
    (the pin reserves the pool's padding slot too: 59ef3b15cc, #32184), and the KV tokens that
    many cells (the oracle's formulas, not the harness's output)."""
    sc = load_scenario(SCENARIO)
    raw = oracle.load(SCENARIO)
    slots = sc.server["max_running_requests"]
    per_slot_bf16 = oracle.mamba_bytes_per_request(raw, conv_bytes=2)
    per_slot_f32 = oracle.mamba_bytes_per_request(raw, conv_bytes=4)
    cell = oracle.hybrid_cell_bytes(raw)
    lost = (slots + 1) * (per_slot_f32 - per_slot_bf16)
    assert lost % cell == 0  # 33 x 2,949,120 B = 1,485 cells of 65,536 B: no rounding in the difference

    base = run_scenario(pristine_tree, sc, verify_remedy=False)
    assert base.environment == {} and base.outcome is Outcome.OK, base.reason

    monkeypatch.setenv("SGLANG_MAMBA_CONV_DTYPE", "float32")
    report = run_scenario(pristine_tree, sc, verify_remedy=False)
    assert report.result.exit_code == 0 and report.outcome is Outcome.OK, report.reason

    b, f = base.figures, report.figures
    assert (b["mamba_cache_per_req_bytes"], f["mamba_cache_per_req_bytes"]) == (per_slot_bf16, per_slot_f32)
    assert b["max_mamba_cache_size"] == f["max_mamba_cache_size"] == slots
    assert abs((b["available_bytes"] - f["available_bytes"]) - lost) <= 1  # the budget is rounded once to bytes
    assert b["max_total_num_tokens"] - f["max_total_num_tokens"] == lost // cell

    assert report.environment == {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
    assert report.to_json()["environment"] == {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
    assert "  environment: SGLANG_MAMBA_CONV_DTYPE=float32 (read by SGLang" in regress_cmd._summary(report, sc)
    assert "environment:" not in regress_cmd._summary(base, sc)


def test_host_settings_do_not_reach_a_test():
    """Run inside the suite (the host's SGLANG_* removed by tests/conftest.py), and by the test below
    with settings in its environment."""
    assert sglang_settings(os.environ) == {}


def test_the_suite_removes_the_hosts_settings():
    env = dict(os.environ, SGLANG_MAMBA_CONV_DTYPE="float32", SGL_ENABLE_JIT_DEEPGEMM="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider",
                        f"{Path(__file__).relative_to(ROOT)}::test_host_settings_do_not_reach_a_test"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "1 passed" in p.stdout
    assert "removed for the tests: SGLANG_MAMBA_CONV_DTYPE, SGL_ENABLE_JIT_DEEPGEMM" in p.stdout


def test_a_bug_reports_evidence_names_the_settings(monkeypatch):
    """tools/bisect.py --report: the evidence names the settings every run inherited
    (issue.render writes its commands under them: tests/bisect/test_bisect_report.py)."""
    from sgl_overlay.bisect import evidence

    monkeypatch.setenv("SGLANG_MAMBA_CONV_DTYPE", "float32")
    assert evidence.environment(ROOT)["sglang_settings"] == {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
