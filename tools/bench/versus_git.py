"""tools/bisect.py side by side with `git bisect run`: the same release
history, the same test command, the executions of each counted.  Used by
tools/bench/bisect_vs_git.py (beside it) and tests/bisect/test_bisect_bench.py
(which loads it by its path).  ``root``: the checkout whose tools/bisect.py
and tools/regress.py run (the current directory unless given)."""
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# name: (scenario, fixed, old release, new release, expected answer)
CASES = {
    "zero-requests-fixed": ("zero-requests-dflash", True, "0.5.11", "0.5.13.post1", "0.5.13"),
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



def _wrapper(tmp, scenario, invert, root):
    counter = tmp / f"count-{'git' if invert is not None else 'ours'}-{time.monotonic_ns()}"
    script = counter.with_suffix(".sh")
    script.write_text(WRAPPER.format(counter=counter, python=sys.executable, regress=root / "tools" / "regress.py",
                                     scenario=scenario, invert=1 if invert else 0))
    return script, counter


def _count(counter):
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def run_git(repo, scenario, fixed, old, new, tmp, root=None):
    root = Path(root or Path.cwd())
    wt = tmp / "git-wt"
    subprocess.run(["git", "clone", "-q", str(repo), str(wt)], check=True)
    script, counter = _wrapper(tmp, scenario, fixed, root)
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


def run_ours(repo, scenario, fixed, old, new, tmp, jobs=1, trees=None, root=None):
    root = Path(root or Path.cwd())
    script, counter = _wrapper(tmp, scenario, None, root)
    refs = ["--good", f"v{new}", "--bad", f"v{old}", "--fixed"] if fixed else ["--good", f"v{old}", "--bad", f"v{new}"]
    log = tmp / f"ours-{jobs}.jsonl"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(root / "tools" / "bisect.py"), "--repo", str(repo), *refs,
                        "--jobs", str(jobs), "--log", str(log), "--tree-cache", str(trees or tmp / "trees"), "--json", "-q",
                        "--", "sh", str(script), "{tree}"], capture_output=True, text=True, cwd=root)
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


def sweep(repo, versions, tmp, trees=None, root=None):
    """For every possible first-bad release in ``versions``: executions of
    git bisect run and of bisect.py (same repo, same cheap command)."""
    root = Path(root or Path.cwd())
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
                p = subprocess.run([sys.executable, str(root / "tools" / "bisect.py"), "--repo", str(repo),
                                    "--good", f"v{versions[0]}", "--bad", f"v{versions[-1]}", "--log",
                                    str(tmp / f"sweep-{i}.jsonl"), "--tree-cache", str(trees or tmp / "trees"),
                                    "--json", "-q", "--", "sh", str(script), "{tree}"], capture_output=True, text=True,
                                   cwd=root)
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
