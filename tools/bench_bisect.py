import os, sys; sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # noqa: E401,E702
__doc__ = """Count test executions: tools/bisect.py against `git bisect run`, same repo, same command.

  python tools/bench_bisect.py [--case NAME ...] [--json]

The repository has one commit per published release (the release's
sglang/ as python/sglang, tagged vVERSION), built from the cached release
trees.  Both tools run the same wrapper around tools/regress.py, which
appends a line to a counter file per execution; git bisect run gets the
exit code inverted for --fixed cases (its old term = exit 0).  Figures
go to docs/bisect.md.
"""
import argparse  # noqa: E402
import fcntl  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from tools.sglo import gitcmd, source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXCLUDE = "__pycache__/\n*.pyc\n.sgl-overlay-release\n*.so\n"

# name: (scenario, fixed, old release, new release, expected answer)
CASES = {
    "zero-requests-fixed": ("zero-requests-dflash", True, "0.5.11", "0.5.16", "0.5.13"),
    "negative-rest-fixed": ("negative-rest-tp8", True, "0.5.9", "0.5.16", "0.5.14"),
    "negative-rest-incident": ("negative-rest-tp8", False, "0.5.9", "0.5.12.post1", "not-in-range"),
    "negative-rest-fixed-wide": ("negative-rest-tp8", True, "0.5.5", "0.5.23", "0.5.14"),
}

WRAPPER = """#!/bin/sh
# one test execution: count it, run the regression harness on the tree $1
echo "$1" >> "{counter}"
"{python}" "{regress}" --tree "$1" --scenario "{scenario}" >/dev/null 2>&1
rc=$?
if [ "{invert}" = 1 ]; then
  case $rc in 0) rc=1 ;; 125) ;; *) rc=0 ;; esac
fi
exit $rc
"""


def commit_release(repo, version, parent, n):
    tree_dir = source.release_tree(version)
    with tempfile.TemporaryDirectory(prefix="sglo-history-") as tmp:
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "a")}
        gitcmd.run(repo, f"--work-tree={tree_dir}", "add", "-A", "--", source.PACKAGE, env=env)
        pkg = gitcmd.out(repo, "write-tree", f"--prefix={source.PACKAGE}/", env=env)
        env = {"GIT_INDEX_FILE": os.path.join(tmp, "b")}
        gitcmd.run(repo, f"--work-tree={tmp}", "read-tree", f"--prefix=python/{source.PACKAGE}/", pkg, env=env)
        root = gitcmd.out(repo, "write-tree", env=env)
    date = f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00"
    args = ["commit-tree", root, "-m", f"sglang {version}\n\nThe published release {version}, unpacked.\n"]
    commit = gitcmd.out(repo, *args, *(["-p", parent] if parent else []),
                        env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    gitcmd.run(repo, "tag", f"v{version}", commit)
    return commit


def release_history(versions, cache=None):
    """A git repository (built once, cached) with one commit per release in
    ``versions`` order on branch main: the release's sglang/ as
    python/sglang (compiled modules left out, as in upstream's git),
    tagged v<version>.  Git hashes the cached release trees in place."""
    key = hashlib.sha256(" ".join(versions).encode()).hexdigest()[:12]
    root = source.cache_dir(cache) / "release-history"
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    with open(root / f".{key}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if (target / "READY").exists():
            return target / "repo"
        shutil.rmtree(target, ignore_errors=True)
        repo = target / "repo"
        gitcmd.init(repo, bare=True)
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "exclude").write_text(EXCLUDE)
        parent = None
        for n, v in enumerate(versions):
            parent = commit_release(repo, v, parent, n)
        gitcmd.run(repo, "update-ref", "refs/heads/main", parent)
        gitcmd.run(repo, "symbolic-ref", "HEAD", "refs/heads/main")
        (target / "READY").write_text(" ".join(versions) + "\n")
    return repo


def releases_between(old, new):
    lo, hi = source.release_key(old), source.release_key(new)
    return [v for v in source.list_releases() if lo <= source.release_key(v) <= hi]


def _wrapper(tmp, scenario, invert):
    counter = tmp / f"count-{'git' if invert is not None else 'ours'}-{time.monotonic_ns()}"
    script = counter.with_suffix(".sh")
    script.write_text(WRAPPER.format(counter=counter, python=sys.executable, regress=ROOT / "tools" / "regress.py",
                                     scenario=scenario, invert=1 if invert else 0))
    return script, counter


def _count(counter):
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def run_git(repo, scenario, fixed, old, new, tmp):
    wt = tmp / "git-wt"
    subprocess.run(["git", "clone", "-q", str(repo), str(wt)], check=True)
    script, counter = _wrapper(tmp, scenario, invert=fixed)
    terms = ["--term-old=broken", "--term-new=fixed"] if fixed else []
    g = ["git", "-C", str(wt), "-c", "advice.detachedHead=false"]
    t0 = time.monotonic()
    subprocess.run(g + ["bisect", "start", "--first-parent", *terms, f"v{new}", f"v{old}"],
                   check=True, capture_output=True)
    p = subprocess.run(g + ["bisect", "run", "sh", str(script), str(wt)], capture_output=True, text=True)
    secs = time.monotonic() - t0
    m = re.search(r"^([0-9a-f]{40}) is the first (?:bad|fixed|new) commit", p.stdout, re.M)
    answer = None
    if m:
        answer = subprocess.run(g + ["describe", "--tags", "--exact-match", m.group(1)], capture_output=True,
                                text=True).stdout.strip().lstrip("v") or m.group(1)
    elif "only skipped commits left" in p.stdout:
        answer = "skipped commits"
    subprocess.run(g + ["bisect", "reset"], capture_output=True)
    return {"answer": answer or f"(no answer, exit {p.returncode})", "executions": _count(counter),
            "seconds": round(secs, 1)}


def run_ours(repo, scenario, fixed, old, new, tmp, jobs=1, trees=None):
    script, counter = _wrapper(tmp, scenario, invert=None)
    refs = ["--good", f"v{new}", "--bad", f"v{old}", "--fixed"] if fixed else ["--good", f"v{old}", "--bad", f"v{new}"]
    log = tmp / f"ours-{jobs}.jsonl"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "bisect.py"), "--repo", str(repo), *refs,
                        "--jobs", str(jobs), "--log", str(log), "--tree-cache", str(trees or tmp / "trees"), "--json", "-q",
                        "--", "sh", str(script), "{tree}"], capture_output=True, text=True)
    secs = time.monotonic() - t0
    try:
        rec = json.loads(p.stdout)
    except ValueError:
        raise SystemExit(f"bisect.py failed (exit {p.returncode}): {p.stderr.strip()[-800:]}")
    v = rec["verdict"]
    answer = rec["first_new"]["label"].split()[-1] if v.startswith("first-") else v
    rounds = len({(r["phase"], r["batch"]) for r in _results(log)}) if jobs > 1 else None
    return {"answer": answer, "executions": _count(counter),
            "endpoint_runs": sum(1 for s in rec["steps"] if s["phase"] == "endpoints"),
            "seconds": round(secs, 1), **({"rounds": rounds} if rounds else {})}


SWEEP_TEST = """#!/bin/sh
# a cheap test: the tree's release version; bad from a given release on
v=$(sed -n "s/^__version__ = version = '\\(.*\\)'$/\\1/p" "$1/python/sglang/_version.py")
echo "$v" >> "{counter}"
case " {bad} " in *" $v "*) exit 1 ;; esac
exit 0
"""


def sweep(repo, versions, tmp, trees=None):
    """For every possible first-bad release in ``versions``: executions of
    git bisect run and of bisect.py (same repo, same cheap command)."""
    wt = tmp / "sweep-wt"
    subprocess.run(["git", "clone", "-q", str(repo), str(wt)], check=True)
    g = ["git", "-C", str(wt)]
    rows = []
    for i in range(1, len(versions)):
        counts = {}
        for who in ("git", "ours"):
            counter = tmp / f"sweep-{who}-{i}"
            script = counter.with_suffix(".sh")
            script.write_text(SWEEP_TEST.format(counter=counter, bad=" ".join(versions[i:])))
            if who == "git":
                subprocess.run(g + ["bisect", "start", "--first-parent", f"v{versions[-1]}", f"v{versions[0]}"],
                               check=True, capture_output=True)
                p = subprocess.run(g + ["bisect", "run", "sh", str(script), str(wt)], capture_output=True, text=True)
                found = re.search(r"^([0-9a-f]{40}) is the first bad commit", p.stdout, re.M)
                answer = subprocess.run(g + ["describe", "--tags", "--exact-match", found.group(1)],
                                        capture_output=True, text=True).stdout.strip().lstrip("v") if found else None
                subprocess.run(g + ["bisect", "reset"], check=True, capture_output=True)
            else:
                p = subprocess.run([sys.executable, str(ROOT / "tools" / "bisect.py"), "--repo", str(repo),
                                    "--good", f"v{versions[0]}", "--bad", f"v{versions[-1]}", "--log",
                                    str(tmp / f"sweep-{i}.jsonl"), "--tree-cache", str(trees or tmp / "trees"),
                                    "--json", "-q", "--", "sh", str(script), "{tree}"], capture_output=True, text=True)
                rec = json.loads(p.stdout)
                answer = rec["first_new"]["label"].split()[-1] if rec["verdict"] == "first-bad" else rec["verdict"]
            counts[who] = (_count(counter), answer)
        rows.append({"first_bad": versions[i], "git": counts["git"][0], "ours": counts["ours"][0],
                     "git_answer": counts["git"][1], "ours_answer": counts["ours"][1]})
    shutil.rmtree(wt)
    return rows


def _results(log):
    out = []
    for line in log.read_text().splitlines():
        r = json.loads(line)
        if r.get("type") == "result":
            out.append(r)
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="python tools/bench_bisect.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only this case (repeatable)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--sweep", metavar="OLD..NEW",
                    help="instead: every possible first-bad release in OLD..NEW, with a cheap test")
    args = ap.parse_args(argv)
    if args.sweep:
        versions = releases_between(*args.sweep.split(".."))
        with tempfile.TemporaryDirectory(prefix="sglo-bench-bisect-") as t:
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
        with tempfile.TemporaryDirectory(prefix="sglo-bench-bisect-") as t:
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
