"""Shared by the planner tests: the test data, the incident's flags, and the re-check
every printed suggestion goes through."""

import json
import subprocess
import sys
from pathlib import Path

from sgl_overlay import lock
from sgl_overlay.planner import core, deployment

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
QWEN36 = DATA / "qwen3.6-27b"
DFLASH = DATA / "qwen3.6-27b-dflash"
LLAMA8B = DATA / "llama-3.1-8b"
LLAMA8B_NOINDEX = DATA / "llama-3.1-8b-noindex"
UNKNOWN_ARCH = DATA / "unknown-arch"
# The pin (upstream.lock): the release of the planner tests that are about no release in particular.
PIN = lock.load(ROOT / "upstream.lock").version
# The release the incident's services ran on (docs/plan.md): the LOGGED_* figures are its log's, so the
# tests that check them plan on it, whatever the pin is (a release-matrix test, docs/testing.md).
INCIDENT = "0.5.12.post1"

# SGLang v0.5.12.post1's start-up log of the incident: "Load weight begin. avail mem=94.24 GB",
# "Load weight end ... avail mem=43.19 GB" (SGLang's GB are GiB).
LOGGED_FREE = [94.24, 43.19]
LOGGED_TOKENS, LOGGED_SLOTS = 11893, 24

# Scenario A (the known-good smoke service) and B2 (zero requests), as SGLang flags.
SMOKE_FLAGS = ("--speculative-algorithm DFLASH --context-length 32768 --max-running-requests 4 "
               "--disable-radix-cache --max-mamba-cache-size 24 --mem-fraction-static 0.6856901").split()
ZERO_FLAGS = ("--speculative-algorithm DFLASH --context-length 32768 --mamba-scheduler-strategy extra_buffer "
              "--max-running-requests 4 --kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.647166 "
              "--disable-cuda-graph").split()


def recheck(dep_kwargs: dict, suggestion: dict, must_work: bool = True) -> core.Sizing:
    """Re-check one printed suggestion independently of the search that found it: append
    its flag to the SGLang flags (parsed again by the release's own ServerArgs; the later
    flag wins), size once more, and require the same verdict and figures."""
    kw = dict(dep_kwargs)
    kw["argv"] = list(kw.get("argv", ())) + suggestion["argv"]
    dep = deployment(**kw)
    s = core.size(dep)
    assert s.verdict == suggestion["verdict"], (suggestion["argv"], s.verdict, s.why)
    if must_work:
        assert s.verdict != core.WONT and s.rank > 0
    for key in ("kv_tokens", "running_requests", "mamba_slots"):
        assert s.ledger.get(key) == suggestion["ledger"].get(key), (suggestion["argv"], key)
    return s


def recheck_all(dep_kwargs: dict, report: dict) -> int:
    """Re-check every suggestion the plan prints (each must start), and every remedy the
    tree stated (each must give the verdict printed for it, working or not); returns
    how many were re-checked."""
    for sug in report["suggestions"] or []:             # None: the search was skipped
        recheck(dep_kwargs, sug)
    for rem in report["tree_remedies"] or []:           # None: nothing was refused
        recheck(dep_kwargs, rem, must_work=rem["works"])
    return len(report["suggestions"] or []) + len(report["tree_remedies"] or [])


def cli(*args, timeout=600):
    """Run tools/plan.py; returns (exit code, stdout, stderr)."""
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "plan.py"), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    return p.returncode, p.stdout, p.stderr


def cli_json(*args, timeout=600):
    """tools/plan.py --json: (exit code, parsed JSON, stderr)."""
    args = [str(a) for a in args]
    i = args.index("--") if "--" in args else len(args)
    code, out, err = cli(*args[:i], "--json", "-q", *args[i:], timeout=timeout)
    return code, json.loads(out), err
