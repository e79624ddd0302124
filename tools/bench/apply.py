#!/usr/bin/env python3
"""Benchmark tools/apply.py against the bare baseline, in one run.

Baseline (what a cold build cannot beat by much): unzip the wheel's
sglang/ + git add -A + git commit. Ours: `python tools/apply.py` cold (a
fresh destination, the artifact already cached) and warm (destination up to
date). Rounds alternate baseline and ours so that the machine's noise hits
both alike; medians and the ratio are printed and written as JSON.

  python tools/bench/apply.py [--rounds 7] [--out docs/bench-apply.json]
"""
import os
import sys
import argparse
import json
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sgl_overlay import artifacts, gitcmd, lock as lockmod, series

ROOT = Path(__file__).resolve().parents[2]     # this script's own checkout


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def baseline(wheel, d):
    d.mkdir()
    if shutil.which("unzip"):
        subprocess.run(["unzip", "-q", str(wheel), "sglang/*", "-d", str(d)], check=True)
    else:
        import zipfile
        with zipfile.ZipFile(wheel) as z:
            z.extractall(d, [n for n in z.namelist() if n.startswith("sglang/")])
    gitcmd.run(d, "init", "-q")
    gitcmd.run(d, "add", "-A")
    gitcmd.run(d, "commit", "-q", "-m", "baseline")


def apply(out):
    subprocess.run([sys.executable, str(ROOT / "tools" / "apply.py"), "-q", "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    lock = lockmod.load(ROOT / "upstream.lock")
    wheel = artifacts.pinned(lock).path           # cached: the benchmark measures building
    base, cold, warm = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-apply-") as tmp:
        tmp = Path(tmp)
        for i in range(args.rounds):
            base.append(timed(lambda: baseline(wheel, tmp / f"b{i}")))
            cold.append(timed(lambda: apply(tmp / f"o{i}")))
            warm.append(timed(lambda: apply(tmp / f"o{i}")))
            shutil.rmtree(tmp / f"b{i}")
            shutil.rmtree(tmp / f"o{i}")
            print(f"round {i + 1}/{args.rounds}: baseline {base[-1]:.3f}s  cold {cold[-1]:.3f}s  warm {warm[-1]:.3f}s",
                  file=sys.stderr)
    m = {k: statistics.median(v) for k, v in (("baseline_s", base), ("cold_s", cold), ("warm_s", warm))}
    result = {**{k: round(v, 3) for k, v in m.items()},
              "cold_over_baseline": round(m["cold_s"] / m["baseline_s"], 2),
              "goal": {"cold_over_baseline_max": 1.5, "warm_s_max": 0.2},
              "rounds": args.rounds, "cpus": os.cpu_count(), "python": platform.python_version(),
              "load_average": os.getloadavg(), "raw": {"baseline": base, "cold": cold, "warm": warm},
              "patches": len(series.read_series(ROOT / "patches")), "command":
              "python tools/bench/apply.py --rounds %d" % args.rounds}
    print(f"baseline {m['baseline_s']:.3f}s  cold {m['cold_s']:.3f}s  "
          f"(x{result['cold_over_baseline']:.2f})  warm {m['warm_s']:.3f}s  [medians of {args.rounds}]")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
