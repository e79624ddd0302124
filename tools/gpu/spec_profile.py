"""Where a decode step's milliseconds go: a torch-profiler trace of a real SGLang server
(its own /start_profile, CPU and GPU activities) read against the phase ranges the probe puts
around the scheduler's and the speculative workers' methods (tools/gpu/probe: SGLO_E2E_PHASES,
`torch.profiler.record_function("sglo:<phase>")`, only while a profiler runs).

For every decode iteration (a `sglo:step:DECODE` range of `Scheduler.run_batch` to the next
one, so the scheduler's own work between steps is in it) the breakdown gives, per phase:
its own CPU time (the range's duration less the phase ranges nested in it), the GPU time of
the kernels, copies and memsets it launched (each GPU event is matched to its launching
runtime call by the profiler's correlation id, and the call to the innermost phase range
around it on its thread), and its host synchronisations (cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize, blocking cudaMemcpy: count and blocked time).
Time in no phase range is `scheduler`, the loop's own.

Pure (json and gzip only; tests/gpu/test_spec_profile.py: a trace of known numbers and a real
torch-profiler trace recorded on a CPU)."""
import bisect
import gzip
import json
import statistics
from pathlib import Path

PREFIX = "sglo:"
STEP = PREFIX + "step:"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize")
OUTSIDE = "scheduler"       # time in no phase range: the event loop's own


def load_trace(path):
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def _events(trace):
    return [e for e in (trace.get("traceEvents") if isinstance(trace, dict) else trace) or []
            if e.get("ph") == "X" and "ts" in e and "dur" in e]


def breakdown(trace, mode="DECODE"):
    """{"iterations", "iteration_ms" (median), "gpu_busy_ms" (mean), "phases": {phase: {"cpu_ms",
    "gpu_ms", "syncs", "sync_ms"} per iteration (means)}}, or {"iterations": 0} when the trace
    has fewer than two such steps (an iteration ends where the next begins)."""
    ev = _events(trace)
    ann = [e for e in ev if str(e.get("name", "")).startswith(PREFIX) and e.get("cat") != "gpu_user_annotation"]
    steps = sorted((e for e in ann if e["name"] == STEP + mode), key=lambda e: e["ts"])
    if len(steps) < 2:
        return {"iterations": 0}
    tid = steps[0]["tid"]
    ranges = sorted((e for e in ann if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"]))
    starts = [r["ts"] for r in ranges]
    runtime = {}
    syncs = []
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                runtime[c] = e
            if e.get("name") in SYNC_CALLS and e["tid"] == tid:
                syncs.append(e)
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]

    def phase_at(ts):
        """The innermost phase range on the step thread that contains ts (None: none)."""
        i = bisect.bisect_right(starts, ts)
        best = None
        for r in ranges[max(0, i - 64):i]:        # nested ranges start before ts, close by
            if r["ts"] <= ts < r["ts"] + r["dur"] and (best is None or r["dur"] <= best["dur"]):
                best = r
        return _phase(best["name"]) if best else OUTSIDE

    windows = [(a["ts"], b["ts"]) for a, b in zip(steps, steps[1:])]
    n = len(windows)
    tot = {}

    def add(phase, key, v):
        tot.setdefault(phase, {"cpu_ms": 0.0, "gpu_ms": 0.0, "syncs": 0, "sync_ms": 0.0})[key] += v

    lo, hi = windows[0][0], windows[-1][1]
    # CPU: self time of every range inside the windows, and the loop's own time around them
    inner = [r for r in ranges if lo <= r["ts"] < hi]
    for r in inner:
        children = [c for c in inner if c is not r and r["ts"] <= c["ts"] and c["ts"] + c["dur"] <= r["ts"] + r["dur"]
                    and _direct(c, r, inner)]
        add(_phase(r["name"]), "cpu_ms", (r["dur"] - sum(c["dur"] for c in children)) / 1e3)
    tops = [r for r in inner if not any(o is not r and o["ts"] <= r["ts"] and r["ts"] + r["dur"] <= o["ts"] + o["dur"]
                                         for o in inner)]
    add(OUTSIDE, "cpu_ms", ((hi - lo) - sum(r["dur"] for r in tops)) / 1e3)
    busy = 0.0
    for g in gpu:
        launch = runtime.get((g.get("args") or {}).get("correlation"))
        if launch is None or launch["tid"] != tid or not lo <= launch["ts"] < hi:
            continue
        add(phase_at(launch["ts"]), "gpu_ms", g["dur"] / 1e3)
        busy += g["dur"] / 1e3
    for s in syncs:
        if lo <= s["ts"] < hi:
            p = phase_at(s["ts"])
            add(p, "syncs", 1)
            add(p, "sync_ms", s["dur"] / 1e3)
    phases = {p: {k: round(v / n, 4) for k, v in d.items()} for p, d in sorted(tot.items())}
    return {"iterations": n, "iteration_ms": round(statistics.median((b - a) / 1e3 for a, b in windows), 4),
            "mean_iteration_ms": round((hi - lo) / 1e3 / n, 4), "gpu_busy_ms": round(busy / n, 4), "phases": phases}


def _phase(name):
    name = name[len(PREFIX):]
    return "step" if name.startswith("step:") else name


def _direct(child, parent, inner):
    """Whether `child` is nested in `parent` with no range between them."""
    for m in inner:
        if m is child or m is parent:
            continue
        if parent["ts"] <= m["ts"] and m["ts"] + m["dur"] <= parent["ts"] + parent["dur"] and \
                m["ts"] <= child["ts"] and child["ts"] + child["dur"] <= m["ts"] + m["dur"] and m["dur"] > child["dur"]:
            return False
    return True


def table(profiles):
    """Markdown: one column per configuration, one row per phase (CPU ms / GPU ms per
    iteration, syncs), then the iteration and the GPU's busy time."""
    names = list(profiles)
    phases = sorted({p for v in profiles.values() for p in v.get("phases", {})})
    out = ["| phase (per decode iteration) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for p in phases:
        cells = []
        for n in names:
            d = profiles[n].get("phases", {}).get(p)
            cells.append(f"{d['cpu_ms']:.3f} / {d['gpu_ms']:.3f}" + (f" ({d['syncs']:g} syncs, {d['sync_ms']:.3f})"
                                                                    if d["syncs"] else "") if d else "")
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    out.append("| **iteration (median wall)** | " + " | ".join(f"**{profiles[n].get('iteration_ms', '-')}**" for n in names) + " |")
    out.append("| GPU busy | " + " | ".join(str(profiles[n].get("gpu_busy_ms", "-")) for n in names) + " |")
    out.append("| iterations | " + " | ".join(str(profiles[n].get("iterations", 0)) for n in names) + " |")
    return "\n".join(out) + "\n\nCells: CPU self ms / GPU ms launched from the phase, per iteration; syncs per iteration and ms blocked.\n"
