"""A decode step's breakdown from a torch-profiler trace (tools/gpu/spec_profile.py) and the probe's
phase ranges (tools/gpu/probe: SGLO_E2E_PHASES): a trace of known numbers, and a real trace that
torch's profiler records on this CPU around methods the probe wrapped."""
import time
import types

import pytest

from tests.gpu.spec_script import probe, profile


def X(name, ts, dur, tid=1, cat="user_annotation", **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1, "cat": cat, "args": args}


def known_trace():
    """Two decode iterations (and the start of a third) of 1000 us each: a step range of 850 us
    holding a draft range of 300 us that launches a 100 us kernel, a target range of 400 us that
    launches a 250 us kernel and blocks 50 us in cudaStreamSynchronize, and a 20 us kernel the
    step launches itself; then process_result, 100 us; an EXTEND step before them, not counted."""
    ev = [X("sglo:step:EXTEND", 0, 500)]
    for k, t in enumerate((1000, 2000)):
        c = 10 * k
        ev += [X("sglo:step:DECODE", t, 850), X("sglo:draft_forward", t + 100, 300),
               X("sglo:target_forward", t + 450, 400),
               X("cudaLaunchKernel", t + 150, 5, cat="cuda_runtime", correlation=c + 1),
               X("draft_k", t + 160, 100, tid=7, cat="kernel", correlation=c + 1),
               X("cudaGraphLaunch", t + 500, 10, cat="cuda_runtime", correlation=c + 2),
               X("verify_k", t + 520, 250, tid=7, cat="kernel", correlation=c + 2),
               X("cudaStreamSynchronize", t + 780, 50, cat="cuda_runtime", correlation=c + 3),
               X("cudaLaunchKernel", t + 420, 5, cat="cuda_runtime", correlation=c + 4),
               X("glue_k", t + 880, 20, tid=7, cat="kernel", correlation=c + 4),
               X("sglo:process_result", t + 850, 100)]
    ev.append(X("sglo:step:DECODE", 3000, 850))
    return {"traceEvents": ev}


def test_known_trace():
    b = profile.breakdown(known_trace())
    assert b["iterations"] == 2 and b["iteration_ms"] == 1.0 and b["gpu_busy_ms"] == 0.37
    ph = b["phases"]
    assert ph["draft_forward"] == {"cpu_ms": 0.3, "gpu_ms": 0.1, "syncs": 0, "sync_ms": 0.0}
    assert ph["target_forward"] == {"cpu_ms": 0.4, "gpu_ms": 0.25, "syncs": 1, "sync_ms": 0.05}
    # the step's own time: 850 - 300 - 400 (its nested phases), its 20 us kernel
    assert ph["step"]["cpu_ms"] == 0.15 and ph["step"]["gpu_ms"] == 0.02
    # the rest of the 1000 us: process_result (100) and the loop's own 50
    assert ph["process_result"]["cpu_ms"] == 0.1 and ph["scheduler"]["cpu_ms"] == 0.05
    assert sum(p["cpu_ms"] for p in ph.values()) == pytest.approx(b["mean_iteration_ms"])
    assert profile.breakdown({"traceEvents": [X("sglo:step:DECODE", 0, 5)]}) == {"iterations": 0}
    md = profile.table({"DDTREE-16": b})
    assert "| target_forward | 0.400 / 0.250 (1 syncs, 0.050) |" in md


def test_probe_ranges_in_a_real_trace(tmp_path):
    """The probe's wrappers around methods of a stand-in scheduler and worker, under torch's own
    profiler (a CPU trace, exported as SGLang's /start_profile exports it): every decode step found,
    the phases' CPU times account for the iterations."""
    import torch

    class Mode:
        name = "DECODE"

    class Batch:
        forward_mode = Mode()

    class Scheduler:
        def run_batch(self, batch):
            time.sleep(0.002)
            Worker().forward_batch_generation(batch)

        def process_batch_result(self, batch, result):
            time.sleep(0.001)

    class Worker:
        def forward_batch_generation(self, batch):
            time.sleep(0.003)
            return torch.ones(64).sum().item()

    mod = types.ModuleType("standin")
    mod.Scheduler, mod.Worker = Scheduler, Worker
    wrapped = probe.annotate_module(mod, (("Scheduler", "run_batch", "step"),
                                          ("Scheduler", "process_batch_result", "process_result"),
                                          ("Worker", "forward_batch_generation", "target_forward"),
                                          ("Worker", "absent", "x")))
    assert wrapped == ["Scheduler.run_batch", "Scheduler.process_batch_result", "Worker.forward_batch_generation"]
    assert probe.annotate_module(mod, (("Scheduler", "run_batch", "step"),)) == []       # once only
    s = Scheduler()
    assert s.run_batch(Batch()) is None           # outside a profiler: a plain call
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(6):
            s.run_batch(Batch())
            s.process_batch_result(None, None)
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    b = profile.breakdown(profile.load_trace(tmp_path / "t.json"))
    assert b["iterations"] == 5
    assert set(b["phases"]) == {"step", "target_forward", "process_result", "scheduler"}
    assert b["phases"]["target_forward"]["cpu_ms"] >= 3.0 and b["phases"]["step"]["cpu_ms"] >= 2.0
    # each figure is rounded to 4 decimals: the sum agrees within their rounding
    rounding = 0.5e-4 * (len(b["phases"]) + 1)
    assert sum(p["cpu_ms"] for p in b["phases"].values()) == pytest.approx(b["mean_iteration_ms"], abs=rounding)
