"""The evidence of a ported series, really run: for every patch i, its
``Evidence:`` tests with ``--tree`` on the upstream with patches 1..i-1
(before) and 1..i (after); the upstream-style test files the series adds,
on the pristine upstream (the files copied in) and with the whole series.

Outcomes come from pytest's own JUnit XML (any interpreter writes it);
``outcome`` and ``verdict`` are pure functions of it."""
import enum
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from .. import gitcmd
from .ports import evidence_of, upstream_tests


class Verdict(enum.StrEnum):
    """One test's verdict across before/after (its value is the report's word)."""
    FAILS_THEN_PASSES = "fails on pristine, passes patched"
    DOES_NOT_FAIL = "does not fail on pristine"
    FAILS_PATCHED = "fails patched"
    NOT_RUN = "not run"


PASSING = ("passed",)
FAILING = ("failed", "error")
MISSING_MODULE = re.compile(r"No module named '([^']+)'")


def node_key(node):
    """A pytest node id as JUnit's (classname, name): tests/a/test_b.py::C::t
    is ("tests.a.test_b.C", "t"); a bare file is (module, None)."""
    parts = node.split("::")
    module = parts[0][:-3].replace("/", ".") if parts[0].endswith(".py") else parts[0].replace("/", ".")
    if len(parts) == 1:
        return module, None
    return ".".join([module] + parts[1:-1]), parts[-1]


def read_junit(path):
    """[(classname, name, outcome, message)] from a JUnit XML file."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    cases = []
    for tc in root.iter("testcase"):
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                msg = (child.get("message") or "") + "\n" + (child.text or "")
                break
        cases.append((tc.get("classname") or "", tc.get("name") or "", outcome, msg))
    return cases


def _cases_of(cases, node):
    """The cases of ``node`` (a node id, or a file) in a run; a collection
    error of its file counts as an error of it."""
    cls, name = node_key(node)
    module = node_key(node.split("::")[0])[0]
    for c in cases:
        c_cls, c_name = c[0], c[1]
        if not c_cls and c_name == module:
            yield ("", c_name, "error", c[3])
        elif name is None and (c_cls == cls or c_cls.startswith(cls + ".")):
            yield c
        elif c_cls == cls and (c_name == name or c_name.startswith(name + "[")):
            yield c


def outcome(cases, node):
    """The outcome of ``node`` (a node id, or a file) in a run: passed,
    failed, error (its module did not collect, or setup failed), skipped,
    or not-run (no test of it in the run)."""
    got = [c[2] for c in _cases_of(cases, node)]
    if not got:
        return "not-run"
    for o in ("error", "failed"):
        if o in got:
            return o
    return "passed" if "passed" in got else "skipped"


def reason(cases, node, limit=160):
    """Why ``node`` failed in a run: the first line of its first failure or
    error message (pytest's, e.g. "AssertionError: assert 'fa3' == 'triton'"),
    or "" when it did not fail."""
    for c in _cases_of(cases, node):
        if c[2] in FAILING:
            line = next((l.strip() for l in c[3].splitlines() if l.strip()), "")
            return line if len(line) <= limit else line[:limit - 1] + "…"
    return ""


def missing_module(cases, output):
    """A third-party module the run lacked (not sglang's own), or None."""
    for text in [c[3] for c in cases if c[2] == "error"] + [output]:
        for m in MISSING_MODULE.finditer(text):
            if m.group(1).split(".")[0] != "sglang":
                return m.group(1)
    return None


def verdict(before, after):
    """A test's verdict from its outcome before and after the patch."""
    if after not in PASSING:
        return Verdict.FAILS_PATCHED
    return Verdict.FAILS_THEN_PASSES if before in FAILING else Verdict.DOES_NOT_FAIL


def summary(output):
    lines = [l for l in output.strip().splitlines() if l.strip()]
    return lines[-1].strip("= ") if lines else ""


def pytest(python, args, cwd, junit, env=None):
    """Run pytest in a subprocess; {exit, summary, cases, output}."""
    junit.unlink(missing_ok=True)
    p = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args],
                       cwd=cwd, capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    return {"exit": p.returncode, "summary": summary(p.stdout) or summary(p.stderr),
            "cases": read_junit(junit), "output": out}


def _checkout(tree, commit):
    gitcmd.run(tree, "checkout", "--quiet", "--force", "--detach", commit)
    gitcmd.run(tree, "clean", "--quiet", "-fdx")


def state_name(label, i):
    return f"{label}" if i == 0 else f"{label} + patches 1..{i}"


def run_series(root, tree, port, commits, label, progress=None, test_python=None):
    """Run the series' evidence in the git work tree ``tree`` whose commits
    ``commits`` are the upstream (0) and each patch applied (1..n).
    Returns {"patches": [per patch], "upstream_tests": [per file]}."""
    say = progress or (lambda m: None)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    junit = Path(tree).parent / "junit.xml"
    total = len(port.patches)
    per_patch = [{"patch": p.name, "index": p.index, "tests": [], "runs": {}} for p in port.patches]
    for i in range(total + 1):
        _checkout(tree, commits[i])
        # state i is "after" for patch i and "before" for patch i+1
        for idx, side in ((i, "after"), (i + 1, "before")):
            if not 1 <= idx <= total:
                continue
            p = port.patches[idx - 1]
            nodes = evidence_of(p)
            if not nodes:
                continue
            say(f"evidence {idx}/{total} {p.name}: {side} ({state_name(label, i)})")
            r = pytest(sys.executable, ["--rootdir", str(root), *nodes, "--tree", str(tree)], root, junit, env)
            per_patch[idx - 1]["runs"][side] = {
                "command": f"python -m pytest {' '.join(nodes)} --tree <{state_name(label, i)}>",
                "exit": r["exit"], "summary": r["summary"],
                "outcomes": {n: outcome(r["cases"], n) for n in nodes},
                "reasons": {n: reason(r["cases"], n).replace(str(tree), "<tree>") for n in nodes}}
    for entry, p in zip(per_patch, port.patches):
        runs = entry["runs"]
        for n in evidence_of(p):
            b, a = runs["before"]["outcomes"][n], runs["after"]["outcomes"][n]
            entry["tests"].append({"node": n, "before": b, "after": a, "verdict": verdict(b, a),
                                   "before_reason": runs["before"]["reasons"][n],
                                   "after_reason": runs["after"]["reasons"][n]})
    files = [(p, f) for p in port.patches for f in upstream_tests(p)]
    uts = [{"file": f, "added_by": p.name, "index": p.index} for p, f in files]
    if files:
        python = test_python or sys.executable
        uenv = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(tree) / "python"),
                                                                     env.get("PYTHONPATH")])))
        _checkout(tree, commits[0])
        for _, f in files:           # the pristine upstream with the series' test files copied in
            (Path(tree) / f).parent.mkdir(parents=True, exist_ok=True)
            (Path(tree) / f).write_bytes(gitcmd.run(tree, "show", f"{commits[-1]}:{f}", binary=True).stdout)
        for side, commit in (("pristine", None), ("patched", commits[-1])):
            if commit:
                _checkout(tree, commit)
            for entry in uts:
                where = label if side == "pristine" else state_name(label, total)
                say(f"upstream-style test {entry['file']}: {side} ({where})")
                r = pytest(python, ["--rootdir", str(tree), entry["file"]], tree, junit, uenv)
                out = outcome(r["cases"], entry["file"])
                lacks = missing_module(r["cases"], r["output"])
                if lacks and out != "passed":
                    out = "not-run"
                entry[side] = {"command": f"PYTHONPATH=python python -m pytest {entry['file']}",
                               "tree": where, "exit": r["exit"], "summary": r["summary"], "outcome": out,
                               **({"missing_module": lacks} if out == "not-run" and lacks else {})}
        for entry in uts:
            b, a = entry["pristine"]["outcome"], entry["patched"]["outcome"]
            lacking = entry["pristine"].get("missing_module") or entry["patched"].get("missing_module")
            entry["verdict"] = Verdict.NOT_RUN if lacking else verdict(b, a)
    junit.unlink(missing_ok=True)
    return {"patches": per_patch, "upstream_tests": uts}
