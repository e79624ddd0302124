"""Count test executions: tools/bisect.py against `git bisect run`, same repo, same command.

  python tools/bench/bisect_vs_git.py [--case NAME ...] [--json]

The repository has one commit per published release (the release's
sglang/ as python/sglang, tagged vVERSION), built from the cached release
trees.  Both tools run the same wrapper around tools/regress.py, which
appends a line to a counter file per execution; git bisect run gets the
exit code inverted for --fixed cases (its old term = exit 0).  Figures
go to docs/bisect.md.
"""
import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from release_history import release_history, releases_between  # its sibling: this folder is sys.path[0]
from versus_git import CASES, run_git, run_ours, sweep  # tools/bench/versus_git.py: this folder is sys.path[0]


def main(argv):
    ap = argparse.ArgumentParser(prog="python tools/bench/bisect_vs_git.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only this case (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--sweep", metavar="OLD..NEW",
                    help="instead: every possible first-bad release in OLD..NEW, with a cheap test")
    args = ap.parse_args(argv)
    if args.sweep:
        versions = releases_between(*args.sweep.split(".."))
        with tempfile.TemporaryDirectory(prefix="sgl-overlay-bench-bisect-") as t:
            rows = sweep(release_history(versions), versions, Path(t))
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print("| first bad | git bisect run | bisect.py (of which 2 endpoints) |")
            print("|---|---|---|")
            for r in rows:
                print(f"| {r['first_bad']} | {r['git']} → {r['git_answer']} | {r['ours']} → {r['ours_answer']} |")
            print(f"| total | {sum(r['git'] for r in rows)} | {sum(r['ours'] for r in rows)} |")
        return 0
    rows = []
    for name in args.case or list(CASES):
        scenario, fixed, old, new, expected = CASES[name]
        versions = releases_between(old, new)
        repo = release_history(versions)
        with tempfile.TemporaryDirectory(prefix="sgl-overlay-bench-bisect-") as t:
            tmp = Path(t)
            git = run_git(repo, scenario, fixed, old, new, tmp)
            ours = run_ours(repo, scenario, fixed, old, new, tmp)
            ours2 = run_ours(repo, scenario, fixed, old, new, tmp, jobs=2)
        row = {"case": name, "scenario": scenario, "fixed": fixed, "range": f"v{old}..v{new}",
               "commits": len(versions), "expected": expected, "log2_bound": math.ceil(math.log2(len(versions))) + 2,
               "git": git, "ours": ours, "ours_jobs2": ours2}
        rows.append(row)
        print(f"[bench] {name}: {len(versions)} commits; git bisect run {git['executions']} -> {git['answer']}; "
              f"bisect.py {ours['executions']} ({ours['endpoint_runs']} endpoint) -> {ours['answer']}; "
              f"--jobs 2: {ours2['executions']} in {ours2.get('rounds')} rounds", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print("| case | commits | expected | git bisect run: runs → answer | bisect.py: runs (of which endpoints) → answer "
              "| bound ⌈log2 N⌉+2 | --jobs 2: runs, rounds |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            g, o, o2 = r["git"], r["ours"], r["ours_jobs2"]
            print(f"| {r['case']} ({r['scenario']}{', --fixed' if r['fixed'] else ''}, {r['range']}) | {r['commits']} "
                  f"| {r['expected']} | {g['executions']} → {g['answer']} | {o['executions']} ({o['endpoint_runs']}) → "
                  f"{o['answer']} | {r['log2_bound']} | {o2['executions']}, {o2.get('rounds')} → {o2['answer']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
