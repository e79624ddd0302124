"""A run's measurements: rounds of every (batch, configuration), configurations interleaved
(spec_bench's closed loop and summary, each row with the host's load: host_load); each server
alone, started, measured and stopped in turn (one_at_a_time); one request at batch 1 under
SGLang's own torch profiler (profile_one, read by spec_profile)."""
import shutil
import threading
import time
from pathlib import Path

from .. import e2e_server
from .. import host_load
from .. import spec_bench as bench
from .. import spec_profile as profile
from .progress import log

PROFILE_STEPS = 20


def one_at_a_time(servers, cfgs, start, timeout, measure_cfg, budget_left, min_left_s, runs, save):
    """Each configuration's server alone, in order: started (start(cfg); one already live, the pair's
    answering AR server, is measured as it is), waited for, measured (measure_cfg(cfg): its rows),
    stopped, before the next starts; one that would start with less than min_left_s of the budget
    left is skipped, said so in runs. The rows of all."""
    rows = []
    for c in cfgs:
        live = c.name in servers.live
        if not live and budget_left() < min_left_s:
            log(f"{c.name}: skipped (budget)")
            runs[c.name] = {"skipped": "budget"}
            continue
        if not live:
            start(c)
        if (live and servers.live[c.name]["run"].get("healthy")) or servers.wait([c.name], timeout):
            rows += measure_cfg(c)
        runs[c.name] = servers.stop(c.name)
        save(rows)
    return rows


def profile_one(base, prompt, trace_dir, max_new, steps=PROFILE_STEPS, timeout=120):
    """One request at batch 1 under SGLang's own torch profiler (CPU + GPU, `steps` forward steps
    from a moment into its decode); the trace's breakdown (spec_profile) or {"error"}."""
    shutil.rmtree(trace_dir, ignore_errors=True)
    Path(trace_dir).mkdir(parents=True, exist_ok=True)
    started = {}

    def start():      # /start_profile may answer only once its steps are done: from a thread
        try:
            started["answer"] = e2e_server.post(base + "/start_profile", {
                "output_dir": str(trace_dir), "num_steps": steps, "activities": ["CPU", "GPU"],
                "with_stack": False, "record_shapes": False}, timeout=timeout)
        except Exception as e:    # noqa: BLE001
            started["error"] = f"start_profile: {type(e).__name__}: {e}"[:300]
    t = threading.Thread(target=start, daemon=True)
    t.start()
    time.sleep(0.3)
    try:    # the request runs while the profiler records its first `steps` forward steps
        bench.post(base + "/generate", {"input_ids": prompt, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}}, timeout=timeout)
    except Exception as e:    # noqa: BLE001
        return {"error": f"generate: {type(e).__name__}: {e}"[:300]}
    t.join(timeout)
    if "error" in started:
        return {"error": started["error"]}
    t_end, stopped, files = time.time() + 60, False, []
    while time.time() < t_end:
        files = sorted(Path(trace_dir).glob("*.trace.json.gz"))
        if files and time.time() - files[-1].stat().st_mtime > 2:
            break
        if not files and not stopped and time.time() > t_end - 50:    # fewer steps than asked: stop it
            stopped = True
            try:
                e2e_server.post(base + "/stop_profile", {}, timeout=timeout)
            except Exception:    # noqa: BLE001 - the wait below says what came of it
                pass
        time.sleep(1)
    if not files:
        return {"error": f"no trace in {trace_dir} after the request"}
    res = profile.breakdown(profile.load_trace(files[-1]))
    res["trace_bytes"] = files[-1].stat().st_size
    return res


def measure(servers, cfgs, batches, rounds, prompt_sets, sampling, budget_left, save=lambda rows: None):
    """Rounds of every batch size and configuration, configurations interleaved; rows of
    spec_bench.summarise, handed to save() after each measurement.  A measurement is started
    only when the budget left exceeds the longest one so far of its batch size (the first of
    each batch size: the budget must be positive)."""
    rows, took = [], {}
    for rnd in range(rounds):
        for b in batches:
            for c in cfgs:
                if c.name not in servers.live or not servers.live[c.name]["run"].get("healthy"):
                    continue
                need = max(took.get(b, [0.0]))
                if budget_left() < need * 1.1 or budget_left() <= 0:
                    log(f"round {rnd + 1} batch {b} {c.name}: skipped (budget: {budget_left():.0f} s left, "
                        f"~{need:.0f} s needed)")
                    continue
                groups = servers.groups()
                before, t0 = host_load.snapshot(groups), time.time()
                run = bench.closed_loop(servers.live[c.name]["base"], prompt_sets[b], b, sampling)
                took.setdefault(b, []).append(time.time() - t0)
                load = host_load.delta(before, host_load.snapshot(groups))
                row = dict(bench.summarise(c, b, run), round=rnd + 1, host=load.as_dict())
                rows.append(row)
                save(rows)
                log(f"round {rnd + 1} batch {b} {c.name}: {row['tokens_per_s']} tok/s, accept {row['accept_length']}, "
                    f"step {row['step_ms']} ms, ttft {row['ttft_ms']} ms" + (f", errors {row['errors'][:1]}" if row["errors"] else ""))
    return rows
