"""A real SGLang server of the end-to-end check, started, exercised and shut down
(run_server), and the memory blocker that leaves a case's GPU the free memory it names
(start_blocker).  Each is a process group of its own, registered in process_groups.GROUPS:
a check that is interrupted, terminated or killed leaves none of them behind
(tests/gpu/test_e2e_groups.py)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from enum import StrEnum
from pathlib import Path

from . import e2e_log
from .process_groups import GROUPS

HERE = Path(__file__).resolve().parent


class Tree(StrEnum):
    """A tree of --work a server runs from: the release (rebuilt from its wheel) or the overlay's wheel."""
    PRISTINE = "pristine"
    PATCHED = "patched"


COMMON = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
          "--disable-cuda-graph", "--disable-piecewise-cuda-graph", "--log-level", "info", "--random-seed", "0"]

BLOCKER = r'''
import sys, time, torch
target = float(sys.argv[1]) * (1 << 30)
free, total = torch.cuda.mem_get_info()
n = int(free - target)
x = torch.empty(max(n, 0), dtype=torch.uint8, device="cuda") if n > 0 else None
print(f"blocker: held {n / (1 << 30):.2f} GiB, free now {torch.cuda.mem_get_info()[0] / (1 << 30):.2f} GiB", flush=True)
time.sleep(100000)
'''


def start_blocker(free_gib):
    """A process that holds the GPU's memory but free_gib (its own group: stop_blocker ends it);
    (the process, its line saying what it holds)."""
    p = GROUPS.popen([sys.executable, "-c", BLOCKER, str(free_gib)], stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def stop_blocker(p):
    GROUPS.release(p)


def post(url, body, timeout=120):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def exercise(base):
    """A batch of varied-length greedy /generate requests and one streaming one."""
    out = {"n_requests": 0, "n_ok": 0, "outputs": []}
    lengths = [5, 37, 300, 1200]
    ids = [[(7 * i + 13 * n) % 20000 + 100 for i in range(n)] for n in lengths]
    sp = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    t0 = time.time()
    try:
        res = json.loads(post(base + "/generate", {"input_ids": ids, "sampling_params": sp}))
        out["n_requests"] = len(ids)
        out["outputs"] = [r.get("output_ids") for r in res]
        out["n_ok"] = sum(1 for r in res if len(r.get("output_ids") or []) == 16)
        out["batch_s"] = round(time.time() - t0, 2)
        chunks = post(base + "/generate", {"input_ids": ids[1], "sampling_params": sp, "stream": True})
        data = [l[6:] for l in chunks.splitlines() if l.startswith("data: ")]
        out["stream_chunks"] = len(data)
        out["stream_ok"] = bool(data) and data[-1] == "[DONE]" and len(json.loads(data[-2]).get("output_ids", [])) >= 1
        out["requests_ok"] = out["n_ok"] == len(ids) and out["stream_ok"]
    except Exception as e:    # noqa: BLE001 - reported, not raised
        out["requests_ok"] = False
        out["request_error"] = f"{type(e).__name__}: {e}"[:500]
    return out


def server_env(tree, work, ledger, probe_dir=None, extra_env=None):
    """The environment a server of `tree` (a folder of --work) runs with: the tree, the bundle's
    wheels and the stand-ins on PYTHONPATH, the ledger's file, the probe when probe_dir is given."""
    work = Path(work)
    path = f"{work / tree}:{work / 'deps'}" + (f":{work / 'stubs'}" if (work / "stubs").exists() else "")
    env = dict(os.environ, PYTHONPATH=path, SGLO_MEMORY_LEDGER=str(ledger), PYTHONUNBUFFERED="1")
    if probe_dir is not None:
        shutil.rmtree(probe_dir, ignore_errors=True)
        env.update(PYTHONPATH=f"{HERE / 'probe'}:{path}", SGLO_E2E_PROBE=str(probe_dir))
    env.update(extra_env or {})
    return env


def start_server(tree, work, model, flags, log, port, common=COMMON, env=None):
    """`python -m sglang.launch_server` in its own process group (GROUPS), output to `log`;
    (the process, its base URL, the command as the report shows it)."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--port", str(port),
           "--host", "127.0.0.1"] + list(common) + list(flags)
    with open(log, "w") as lf:       # its own process group: the shutdown's SIGINT reaches all of it
        p = GROUPS.popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env)
    return p, f"http://127.0.0.1:{port}", " ".join(cmd[1:]).replace(str(work), "$WORK")


def wait_healthy(p, base, timeout, t0=None):
    """True once /health answers 200, False when the process exits or `timeout` s pass (from t0)."""
    t0 = time.time() if t0 is None else t0
    while time.time() - t0 < timeout and p.poll() is None:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except Exception:    # noqa: BLE001
            time.sleep(2)
    return False


def shutdown(p, run):
    """SIGINT to the server's group, 60 s to end, then whatever is left of the group is killed;
    records "shutdown" (or the exit code of a server that had already ended) in run."""
    if p.poll() is None:
        GROUPS.signal_group(p, signal.SIGINT)
        try:
            p.wait(60)
            run["shutdown"] = "clean" if p.returncode in (0, -2, 130) else f"exit {p.returncode}"
        except subprocess.TimeoutExpired:
            run["shutdown"] = "killed after 60 s"
    else:
        run["exit_code"] = p.returncode
    GROUPS.release(p)       # what is left of its group (a scheduler, a detokenizer) is killed


def run_server(tree, work, model, flags, prefix, port, start_timeout, common=COMMON, exercise_fn=None, probe=False,
               extra_env=None):
    """Start, exercise (exercise_fn(base) -> dict, default `exercise`), shut down, parse.
    probe: the allocation probe (tools/gpu/probe) records the pools and free-memory
    readings of the server's processes (run["probe"])."""
    log = Path(f"{prefix}.log.full")
    ledger = Path(f"{prefix}.ledger.json")
    probe_dir = Path(work) / "probe" / Path(prefix).name      # records go into e2e.json, not under --out
    env = server_env(tree, work, ledger, probe_dir if probe else None, extra_env)
    t0 = time.time()
    p, base, command = start_server(tree, work, model, flags, log, port, common, env)
    run = {"command": command, "healthy": False}
    if extra_env:
        run["env"] = dict(extra_env)      # e2e_plan sizes with the same SGLANG_* settings
    run["healthy"] = wait_healthy(p, base, start_timeout, t0)
    run["start_s"] = round(time.time() - t0, 1)
    if run["healthy"]:
        run.update((exercise_fn or exercise)(base))
    shutdown(p, run)
    text = log.read_text(errors="replace")
    run["log_figures"] = e2e_log.parse_log(text)
    if ledger.exists():
        run["ledger"] = e2e_log.parse_ledger(ledger.read_text())
        run["ledger_raw"] = {k: v for k, v in json.loads(ledger.read_text()).items() if k in ("figures", "reservations")}
    if probe:
        run["probe"] = read_probe(probe_dir)
    log.unlink()
    Path(f"{prefix}.log").write_text(trim_log(text))
    return run


def trim_log(text):
    """A server log kept small: the lines the parser reads (first 200), and the last 60."""
    keep = [l for l in text.splitlines() if any(k in l for k in ("avail mem", "Cache is allocated", "max_total_num_tokens",
                                                                  "server_args=", "Error", "remedy:", "Memory ledger",
                                                                  "not found in params_dict", "Capture cuda graph",
                                                                  "DDTREE", "dtype"))]
    return "\n".join(keep[:200] + ["..."] + text.splitlines()[-60:]) + "\n"


def read_probe(folder):
    """The allocation probe's records of every process of one server."""
    pools, free = [], []
    for f in sorted(Path(folder).glob("probe.*.json")):
        d = json.loads(f.read_text())
        pools += d["pools"]
        free += [dict(r, pid=d["pid"]) for r in d["free_readings"]]
    return {"pools": pools, "free_readings": free}

