"""How long `tools/plan.py` takes to print its verdict: this checkout against a baseline
checkout, interleaved in one run (the machine's load hits both alike); medians and ratios.

  python tools/bench/plan_verdict.py --baseline DIR [--runs N] [--tree PATH] [-- PLAN ARGS...]

DIR is another checkout (e.g. `git worktree add /tmp/base 66267d6`, the planner before issue 40,
which printed its verdict with everything else, after the sensitivity runs and the suggestion
search).  Each run is `python DIR/tools/plan.py ARGS` in a fresh process, the checkout's own
library first on the path; "verdict" is the time from the start to the first stdout line that
begins "VERDICT:", "exit" the process's whole life.  The plan's arguments default to issue 40's
RTX PRO 6000 command (Qwen3.6-27B + DFlash, the block-size regression); `--tree` (default this
checkout's build/sglang) is given to both sides, so both size the same tree.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "plan" / "data"
DEFAULT = [str(DATA / "qwen3.6-27b"), "--draft", str(DATA / "qwen3.6-27b-dflash"), "--gpu", "RTX PRO 6000 Blackwell",
           "--", "--mem-fraction-static", "0.65", "--kv-cache-dtype", "fp8_e4m3", "--max-running-requests", "4",
           "--mamba-scheduler-strategy", "extra_buffer", "--context-length", "32768", "--speculative-algorithm", "DFLASH"]


def _env(checkout: Path, paths: dict) -> dict:
    """The checkout's own ``sgl_overlay`` first on the path (a folder holding only a link to it:
    ``tools/`` itself would shadow the standard library's ``bisect``)."""
    if checkout not in paths:
        d = Path(tempfile.mkdtemp(prefix="sglo-bench-path-"))
        (d / "sgl_overlay").symlink_to(checkout.resolve() / "tools" / "sgl_overlay")
        paths[checkout] = d
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(paths[checkout])] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))


def once(checkout: Path, args: list[str], paths: dict) -> dict:
    """(seconds to the VERDICT line, seconds to exit, exit code) of one plan.py run."""
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, str(checkout / "tools" / "plan.py"), *args], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, cwd=checkout, env=_env(checkout, paths))
    verdict = None
    for line in p.stdout:
        if verdict is None and line.startswith("VERDICT:"):
            verdict = time.perf_counter() - t
    code = p.wait()
    return {"verdict_s": verdict, "exit_s": time.perf_counter() - t, "exit_code": code}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, plan_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, None)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="another checkout: its tools/plan.py is the baseline")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tree", default=str(ROOT / "build" / "sglang"), help="the tree both sides plan")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(ours)
    base = Path(a.baseline).resolve()
    if not (base / "tools" / "plan.py").is_file():
        raise SystemExit(f"error: {base} has no tools/plan.py; give a checkout of sgl-overlay with --baseline")
    args = plan_args or DEFAULT
    cut = args.index("--") if "--" in args else len(args)
    args = args[:cut] + ["--tree", a.tree] + args[cut:]
    paths: dict = {}
    runs = {"this": [], "baseline": []}
    for i in range(a.runs):
        for side, checkout in (("this", ROOT), ("baseline", base)):
            r = once(checkout, args, paths)
            runs[side].append(r)
            print(f"[bench] run {i + 1}/{a.runs} {side}: verdict {r['verdict_s']:.2f} s, exit {r['exit_s']:.2f} s "
                  f"(code {r['exit_code']})", file=sys.stderr, flush=True)

    def med(side, key):
        vals = [r[key] for r in runs[side] if r[key] is not None]
        return statistics.median(vals) if vals else None

    out = {"runs": runs, "args": args, "cpus": os.cpu_count(),
           "median": {side: {k: med(side, k) for k in ("verdict_s", "exit_s")} for side in runs}}
    v_this, v_base = out["median"]["this"]["verdict_s"], out["median"]["baseline"]["verdict_s"]
    out["verdict_ratio"] = v_this / v_base if v_this and v_base else None
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for side in runs:
            m = out["median"][side]
            print(f"{side:9s} verdict median {m['verdict_s']:.2f} s, exit median {m['exit_s']:.2f} s ({a.runs} runs)")
        print(f"verdict: this / baseline = {out['verdict_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
