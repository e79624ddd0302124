"""Helpers for the reliability tests: real processes started together or
killed at random moments, a local package index (pip's find-links over the
tests' cache, no network), and a record of every scenario's runs and
failures for docs/reliability.md."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
SEED = 18                                       # issue #18: every random moment comes from this seed
RECORD_ENV = "SGL_OVERLAY_RELIABILITY_RECORD"   # a JSON-lines file the figures are appended to


def tool(name, *args):
    return [sys.executable, str(TOOLS / f"{name}.py"), *map(str, args)]


def local_index_env(cache, releases=("0.5.9",)):
    """pip served from the test cache's artifacts only (no index at all),
    tools caching into ``cache``, and their temporary folders beside it: a
    process these tests kill cannot remove its own, and they must not pile
    up in the system's temporary directory run after run.  ``releases``: the
    artifacts pip must find there, fetched into the test cache first (with
    the index, once) so that the test does not depend on which test ran first."""
    from sgl_overlay import artifacts as store, project
    for version in releases:
        store.release(version)
    artifacts = Path(os.environ[project.CACHE_ENV]) / "artifacts"
    scratch = Path(cache).with_name(Path(cache).name + "-tmp")
    scratch.mkdir(parents=True, exist_ok=True)
    return {**os.environ, project.CACHE_ENV: str(cache), "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(artifacts), "TMPDIR": str(scratch)}


def moments(n, upto, seed=SEED):
    rng = random.Random(seed)
    return [round(rng.uniform(0.02, upto), 3) for _ in range(n)]


def kill_after(cmd, delay, **kw):
    """Start ``cmd``, SIGKILL it (the process itself, as a crash would;
    its children run on) after ``delay`` seconds.  Returns its exit code
    (negative: killed) and stderr."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        os.kill(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    return p.returncode, err


def timed(cmd, **kw):
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    return p, time.monotonic() - t


def record(scenario, runs, failures, **extra):
    path = os.environ.get(RECORD_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"scenario": scenario, "runs": runs, "failures": failures, **extra}) + "\n")


def start_together(cmds, **kw):
    """Start every command at once; (exit code, stdout, stderr) of each."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw) for c in cmds]
    return [_wait(p) for p in procs]


def _wait(p):
    out, err = p.communicate(timeout=600)
    return p.returncode, out, err


def tree_digest(d):
    """path -> sha256 of every file under ``d`` (symlinks by target)."""
    import hashlib
    d = Path(d)
    out = {}
    for p in sorted(d.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(d))] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
