"""The evidence for a bug report (``issue.render``), gathered after a
``first-bad`` verdict: the harness run again on the last good and the first
bad tree (the same trees the bisection tested, full reports), each stated
remedy the harness did not re-run applied and re-run, the scenario file, and
the environment.  I/O only; the text is ``issue.render``'s."""
import dataclasses
import importlib.metadata
import os
import platform
import shlex
from pathlib import Path

from .. import TOOL_VERSION, gitcmd, monotone
from ..harness.remedy import Relation
from ..harness.environment import sglang_settings
from ..harness.outcome import Outcome

KEPT = ("scenario", "version", "layout", "outcome", "reason", "figures", "error", "notes", "log", "remedy",
        "remedies", "passed", "judgement", "drafter_reading")


def trimmed(report):
    """The parts of a harness report the bug report uses (no traceback, no
    attribute reads, no flag-resolution table, no timings)."""
    out = {k: report.get(k) for k in KEPT if k in report}
    out["figures"] = {k: v for k, v in (report.get("figures") or {}).items() if k != "resolution"}
    if out.get("error"):
        out["error"] = {k: v for k, v in out["error"].items() if k != "traceback"}
    return out


def rerun_command(header, rng, public_repo, report_path):
    """The command that bisects again and writes this report again, citing
    the public repository rather than the clone this run read."""
    cmd = ["python", "tools/bisect.py", *rng.cli_args(public_repo)]
    cmd += ["--scenario", header["test"]["scenario"], "--report", str(report_path)]
    return shlex.join(cmd)


def environment(root):
    root = Path(root)
    commit = gitcmd.run(root, "rev-parse", "HEAD", check=False).stdout.strip() or "unknown (not a git checkout)"
    # the code and scenarios that make a report (not docs: a report being rewritten is not a change to them)
    dirty = gitcmd.run(root, "status", "--porcelain", "--untracked-files=no", "--", "tools", "pyproject.toml",
                       check=False).stdout.strip()
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "not installed"
    return {"python": platform.python_version(), "torch": torch,
            "platform": f"{platform.system()} {platform.machine()}", "project_commit": commit,
            "project_dirty": bool(dirty), "tool_version": TOOL_VERSION,
            # the SGLang settings every harness run of the bisection inherited (harness/environment.py)
            "sglang_settings": sglang_settings(os.environ)}


def _scenario_file(scenario, root):
    path = Path(scenario.path).resolve()
    try:
        return str(path.relative_to(root))
    except ValueError:
        return path.name


def collect(rec, rng, header, trees, public_repo, report_path, root, progress=None):
    """The evidence dict ``issue.render`` takes (its docstring lists the keys);
    ``root`` is the checkout the bisection runs in (its commit is evidence)."""
    from ..harness import load_scenario, run_scenario

    say = progress or (lambda m: None)
    scenario = load_scenario(header["test"]["scenario"])
    sides, reruns, searched = {}, [], []
    for key, which in (("last_good", "last_old"), ("first_bad", "first_new")):
        point = rng.point(rec[which]["id"])
        tree, _, held = trees.get(point)
        try:
            say(f"report: running {scenario.name} on the {key.replace('_', ' ')} {point.short()}")
            report = run_scenario(tree, scenario).to_json()
            sides[key] = trimmed(report)
            if key != "first_bad":
                continue
            for r in report.get("remedies") or []:
                if r.get("works") or not r.get("parsed"):
                    continue
                p = r["parsed"]
                if "rerun_outcome" not in r:
                    say(f"report: re-running {scenario.name} on {point.short()} with {p['flag']} {p['value']} applied")
                    reruns.append({"remedy": p, "report": trimmed(_run(tree, scenario, p["key"], p["value"]))})
                if Relation(p["relation"]) is Relation.ABOVE and isinstance(p["value"], float) and not searched:
                    searched = searches(tree, scenario, p, sides.get("last_good"), say)
        finally:
            if held:
                trees.trees.release(held)
    old = rng.extra_old[0] if rng.extra_old else rng.points[0]
    return {
        "verdict": rec,
        "range": {"kind": rng.kind, "old_ref": old.ref or old.id, "new_ref": rng.points[-1].ref or rng.points[-1].id,
                  "merge_base": rng.points[0].id if rng.extra_old else None, "size": len(rng.points)},
        "public_repo": public_repo,
        "command": rerun_command(header, rng, public_repo, report_path),
        "scenario": {"name": scenario.name, "file": _scenario_file(scenario, root), "text": Path(scenario.path).read_text()},
        **sides,
        "remedy_reruns": reruns,
        "working_values": searched,
        "environment": environment(root),
    }


def _run(tree, scenario, key, value):
    from ..harness import run_scenario

    return run_scenario(tree, dataclasses.replace(scenario, server={**scenario.server, key: value}),
                        verify_remedy=False).to_json()


STEP = 1000                     # the search's resolution: 0.001, the precision upstream's hint is given in
RESTORED = ("max_total_num_tokens", "max_running_requests", "max_mamba_cache_size")


def searches(tree, scenario, remedy, last_good, say):
    """What value of the remedy's flag does work: the smallest that starts
    the scenario at all, and (the last good point started it) the smallest
    that gives back the last good point's KV tokens, requests and slots."""
    seen = {}
    out = [smallest_working(tree, scenario, remedy, say, seen=seen)]
    figs = (last_good or {}).get("figures") or {}
    if out[0]["value"] is not None and (last_good or {}).get("outcome") == Outcome.OK:
        goal = {k: figs[k] for k in RESTORED if figs.get(k) is not None}
        out.append(smallest_working(tree, scenario, remedy, say, goal=goal, seen=seen,
                                    floor=round(out[0]["value"] * STEP) - 1))
    return out


def smallest_working(tree, scenario, remedy, say, goal=None, floor=None, seen=None):
    """The smallest value (in steps of 1/STEP, above both the one the
    message stated and the scenario's own, which are known to fail, or above
    ``floor``, up to 0.99) with which the scenario starts ("ok") on this
    tree, with each figure in ``goal`` at least as given: a binary search,
    assuming more of the flag never hurts.  None found: ``value`` is None.
    ``seen`` (value -> report) is shared between searches."""
    seen = {} if seen is None else seen
    goal = goal or {}
    current = scenario.server.get(remedy["key"])        # refused with it too
    lo = max(round(remedy["value"] * STEP), int(current * STEP) if isinstance(current, (int, float)) else 0,
             floor or 0)
    hi = round(0.99 * STEP)
    out = {"flag": remedy["flag"], "key": remedy["key"], "stated": remedy["value"], "goal": goal}

    def run(v):
        if v not in seen:
            seen[v] = trimmed(_run(tree, scenario, remedy["key"], v / STEP))
        r = seen[v]
        figs = r.get("figures") or {}
        return r, r["outcome"] == Outcome.OK and all((figs.get(k) or 0) >= n for k, n in goal.items())

    say(f"report: searching the smallest {remedy['flag']} that starts {scenario.name}"
        + (f" with {', '.join(f'{k} >= {n}' for k, n in goal.items())}" if goal else "")
        + f", {lo / STEP:.3f}..{hi / STEP:.3f}")
    found = monotone.boundary(run, min(lo, hi - 1), hi)     # lo fails (known); the top is tried first
    if found.passing is None:
        return {**out, "value": None, "tried_up_to": hi / STEP, "at_top": found.failing[1]}
    below = found.failing
    return {**out, "value": found.passing[0] / STEP, "at_value": found.passing[1],
            "below": {"value": below[0] / STEP, "report": below[1]} if below else None}


def write(path, text):
    """The report, whole or not at all (renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.new"
    tmp.write_text(text)
    os.replace(tmp, path)
