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

from .. import TOOL_VERSION, gitcmd, project

KEPT = ("scenario", "version", "layout", "outcome", "reason", "figures", "error", "notes", "log", "remedy",
        "remedies", "passed", "judgement")


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
    cmd = ["python", "tools/bisect.py"]
    if rng.kind == "releases":
        cmd += ["--releases", f"{rng.points[0].id}..{rng.points[-1].id}"]
    else:
        old = rng.extra_old[0] if rng.extra_old else rng.points[0]
        cmd += ["--repo", public_repo, "--good", old.ref or old.id, "--bad", rng.points[-1].ref or rng.points[-1].id]
    cmd += ["--scenario", header["test"]["scenario"], "--report", str(report_path)]
    return shlex.join(cmd)


def environment(root):
    root = Path(root)
    commit = gitcmd.run(root, "rev-parse", "HEAD", check=False).stdout.strip() or "unknown (not a git checkout)"
    dirty = gitcmd.run(root, "status", "--porcelain", "--untracked-files=no", check=False).stdout.strip()
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "not installed"
    return {"python": platform.python_version(), "torch": torch,
            "platform": f"{platform.system()} {platform.machine()}", "project_commit": commit,
            "project_dirty": bool(dirty), "tool_version": TOOL_VERSION}


def _scenario_file(scenario):
    path = Path(scenario.path).resolve()
    try:
        return str(path.relative_to(project.ROOT))
    except ValueError:
        return path.name


def collect(rec, rng, header, trees, public_repo, report_path, progress=None):
    """The evidence dict ``issue.render`` takes (its docstring lists the keys)."""
    from ..harness import load_scenario, run_scenario

    say = progress or (lambda m: None)
    scenario = load_scenario(header["test"]["scenario"])
    sides, reruns = {}, []
    for key, which in (("last_good", "last_old"), ("first_bad", "first_new")):
        point = rng.point(rec[which]["id"])
        tree, _, held = trees.get(point)
        try:
            say(f"report: running {scenario.name} on the {key.replace('_', ' ')} {point.short()}")
            report = run_scenario(tree, scenario)
            sides[key] = trimmed(report)
            if key != "first_bad":
                continue
            for r in report.get("remedies") or []:
                if r.get("works") or not r.get("parsed") or "rerun_outcome" in r:
                    continue
                p = r["parsed"]
                say(f"report: re-running {scenario.name} on {point.short()} with {p['flag']} {p['value']} applied")
                applied = dataclasses.replace(scenario, server={**scenario.server, p["key"]: p["value"]})
                reruns.append({"remedy": p, "report": trimmed(run_scenario(tree, applied, verify_remedy=False))})
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
        "scenario": {"name": scenario.name, "file": _scenario_file(scenario), "text": Path(scenario.path).read_text()},
        **sides,
        "remedy_reruns": reruns,
        "environment": environment(project.ROOT),
    }


def write(path, text):
    """The report, whole or not at all (renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.new"
    tmp.write_text(text)
    os.replace(tmp, path)
