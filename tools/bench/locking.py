"""What the destination lock adds to a warm apply.py (up-to-date no-op):
alternating rounds with and without it, in one run; medians.

  python tools/bench/locking.py [--out DIR] [--rounds N]
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "build" / "bench-locking" / "sglang"))
    ap.add_argument("--rounds", type=int, default=11)
    a = ap.parse_args()
    base = [sys.executable, str(ROOT / "tools" / "apply.py"), "--out", a.out, "-q"]
    subprocess.run(base, check=True, capture_output=True)                  # build once
    t = {"locked": [], "unlocked": []}
    for _ in range(a.rounds):
        for kind, extra in (("locked", []), ("unlocked", ["--unlocked-for-bench"])):
            s = time.monotonic()
            p = subprocess.run(base + extra, capture_output=True, text=True)
            t[kind].append(time.monotonic() - s)
            assert p.returncode == 0 and "up to date" in p.stdout, p.stderr
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"warm no-op, median of {a.rounds} alternating rounds: with the lock {med['locked']:.3f} s, "
          f"without {med['unlocked']:.3f} s, the lock adds {med['locked'] - med['unlocked']:+.3f} s")


if __name__ == "__main__":
    main()
