"""Parent side: run a scenario on a tree in a fresh interpreter, verify remedies, judge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from . import environment
from . import layout as layout_mod
from . import outcome as outcome_mod
from .scenario import Scenario

from ..errors import FAILED, OK, UNTESTABLE
from ..extras import MissingDependency, require, third_party_missing
from ..project import ROOT


def run_child(root: Path, request: dict, timeout: float = 120.0,
              module: str = "sgl_overlay.harness.child", launch=subprocess.run) -> dict:
    """One fresh interpreter, one sizing run; returns the child's JSON.

    ``module`` is the child entry point (``python -m MODULE``, request JSON on
    stdin, one result JSON line on stdout); the planner's flag parser uses it too.
    ``launch`` runs it, with ``subprocess.run``'s arguments and result (a caller
    that must be able to stop its children, such as bisect, passes its own).

    The child inherits this process's environment, as a server started from the same shell
    would: the SGLang settings in it (``SGLANG_*``) are honoured, and the result names them
    (``environment``, environment.py)."""
    require("harness", "the regression harness")
    req = dict(request, root=str(root))
    env = dict(os.environ)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    t = time.perf_counter()
    proc = launch(
        # -m from the checkout's root: the test probes (tests.*) import too
        [sys.executable, "-m", module],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env=env,
        timeout=timeout,
    )
    wall = time.perf_counter() - t
    settings = environment.sglang_settings(env)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        _stop_on_missing_package(root, None, proc.stderr)
        return {
            "completed": False,
            "error": {
                "type": "ChildFailed",
                "kind": "untestable",
                "origin": "harness",
                "where": None,
                "message": f"the child interpreter exited {proc.returncode} without a result; "
                f"its stderr ends: {proc.stderr[-1500:]}",
            },
            "timing": {"wall_s": round(wall, 4)},
            "environment": settings,
        }
    result = json.loads(lines[-1])
    _stop_on_missing_package(root, result.get("error"), "")
    result.setdefault("timing", {})["wall_s"] = round(wall, 4)
    result["stderr_tail"] = proc.stderr[-2000:]
    result["environment"] = settings
    return result


def _stop_on_missing_package(root, err, stderr: str) -> None:
    """A package missing from this environment stops the run (exit 2,
    naming it): neither the tree nor the scenario is at fault.  ``err`` is a
    completed child's error (the flag parser's child reports a plain message
    string), ``stderr`` a child's that ended without a result."""
    if not isinstance(err, dict):
        err = {}
    package = err.get("package") if err.get("kind") == "environment" else None
    if package is None and stderr:
        m = re.search(r"^ModuleNotFoundError: No module named '([\w.]+)'", stderr, re.M)
        package = third_party_missing(m.group(1)) if m else None
    if package:
        where = err.get("where") or "the harness's child interpreter"
        raise MissingDependency(package, f"running {layout_mod.version_of(root) or root}'s sizing code ({where})")


def run_scenario(tree: str | Path, scenario: Scenario, verify_remedy: bool = True,
                 measure_allocation: bool = False, launch=subprocess.run) -> dict:
    """The full report: outcome, figures, remedy (verified by a re-run), pass/fail.

    launch: how each child interpreter is run (``run_child``).

    measure_allocation: after a completed sizing, build the pools with the
    tree's own classes on torch's meta device and record the bytes
    (figures["allocation"], allocation.py; mixin-bytes era)."""
    root = layout_mod.source_root(tree)
    lay = layout_mod.detect(root)
    request = scenario.to_request()
    if measure_allocation:
        request["measure_allocation"] = True
    child = run_child(root, request, launch=launch)
    verdict = outcome_mod.classify(child)
    report = {
        "scenario": scenario.name,
        "tree": str(root),
        "version": layout_mod.version_of(root),
        "layout": lay.era,
        "outcome": verdict["outcome"],
        "reason": verdict["reason"],
        "figures": child.get("figures", {}),
        "error": _public_error(child.get("error")),
        "notes": child.get("notes", []),
        # from v0.5.14 the sizing's reading holds the drafter's weights (draft_reading.py)
        "drafter_reading": child.get("drafter_reading"),
        "timing": child.get("timing", {}),
        "reads": child.get("reads", []),
        "ledger": child.get("ledger"),
        "log": child.get("log", []),
        # the SGLang settings (SGLANG_*) the child ran under: the caller's, honoured as the server would
        "environment": child.get("environment", {}),
    }
    if verdict["outcome"] == "refused":
        remedies = outcome_mod.parse_remedies(verdict.get("message", ""))
        checked = [_verify(root, scenario, r, measure_allocation, launch=launch) if verify_remedy else
                   {"parsed": r.to_dict(), "works": None, "why": "not verified"} for r in remedies]
        report["remedy"] = checked[0] if checked else {
            "parsed": None, "works": False, "why": "the message states no flag value"}
        report["remedies"] = checked
    ledger = report["ledger"] or {}
    report["case"] = (ledger.get("figures") or {}).get("case")
    if verdict["outcome"] == "ok" and report["case"] == "over_budget":
        # Started over budget (docs/memory.md, case 2): the warning's remedy
        # must reserve the pools properly, i.e. re-run as case "fits".
        report["warning"] = ledger.get("reason")
        remedies = outcome_mod.parse_remedies("\n".join(
            f"remedy: {r['flag']} = {r['value']}" for r in ledger.get("remedies") or []))
        checked = [_verify(root, scenario, r, measure_allocation, want_case="fits", launch=launch)
                   if verify_remedy else {"parsed": r.to_dict(), "works": None, "why": "not verified"}
                   for r in remedies]
        report["remedy"] = checked[0] if checked else {
            "parsed": None, "works": False, "why": "the warning states no flag value"}
        report["remedies"] = checked
    report["passed"], report["judgement"] = judge(scenario, report)
    return report


def _public_error(err):
    if not err:
        return None
    return {k: err.get(k) for k in ("type", "message", "kind", "origin", "where", "traceback") if k in err}


def _verify(root: Path, scenario: Scenario, remedy: outcome_mod.Remedy,
            measure_allocation: bool = False, want_case: str | None = None, launch=subprocess.run) -> dict:
    current = scenario.server.get(remedy.key)
    out = {"parsed": remedy.to_dict(), "current": current}
    if remedy.relation == "above" and isinstance(current, (int, float)) and current >= remedy.value:
        out.update(works=False, why=f"already satisfied: {remedy.key} is {current}, "
                   f"not below the suggested {remedy.value}; applying it cannot help")
        return out
    if remedy.relation == "below" and isinstance(current, (int, float)) and current <= remedy.value:
        out.update(works=False, why=f"already satisfied: {remedy.key} is {current} <= {remedy.value}")
        return out
    request = scenario.to_request({remedy.key: remedy.value})
    if measure_allocation:
        request["measure_allocation"] = True
    rerun = run_child(root, request, launch=launch)
    v = outcome_mod.classify(rerun)
    out.update(
        applied={remedy.key: remedy.value},
        rerun_outcome=v["outcome"],
        rerun_reason=v["reason"],
        rerun_figures=rerun.get("figures", {}),
        rerun_ledger=rerun.get("ledger"),
        works=v["outcome"] == "ok",
        why=f"re-run with {remedy.flag} {remedy.value}: {v['outcome']} ({v['reason']})",
    )
    if want_case is not None:
        case = ((rerun.get("ledger") or {}).get("figures") or {}).get("case")
        out["rerun_case"] = case
        out["works"] = out["works"] and case == want_case
        out["why"] += f", case {case}"
    return out


def exit_code(report: dict) -> int:
    """A report's exit status by git bisect run's protocol: 0 pass, 1 fail, 125 untestable."""
    return {True: OK, False: FAILED, None: UNTESTABLE}[report["passed"]]


def report_json(report: dict) -> str:
    """The report as ``tools/regress.py --json`` prints it, its exit status included."""
    return json.dumps({**report, "exit": exit_code(report)}, indent=2, default=str)


def judge(scenario: Scenario, report: dict) -> tuple[bool | None, str]:
    """(passed, why); passed is None for untestable (exit 125)."""
    o = report["outcome"]
    exp = scenario.expect
    if o == "untestable":
        return None, f"untestable: {report['reason']}"
    if o not in exp.passing:
        return False, f"{o} is not among the passing outcomes {exp.passing}: {report['reason']}"
    if exp.case is not None and report.get("ledger") is not None and report.get("case") != exp.case:
        return False, f"{o}, but the ledger's case is {report.get('case')}, not {exp.case}"
    if o == "ok" and exp.figures:
        figs = report.get("figures") or {}
        wrong = [f"{k} is {figs.get(k)}, not {v}" for k, v in exp.figures.items() if figs.get(k) != v]
        if wrong:
            return False, "ok, but " + "; ".join(wrong) + f" ({report['reason']})"
    if o == "ok" and report.get("case") == "over_budget" and exp.remedy == "works":
        failing = [r for r in report.get("remedies", []) if not r.get("works")]
        if not report.get("remedies") or failing:
            return False, ("started over budget; the warning's remedy does not reserve the pools: "
                           + ((failing or [report.get("remedy") or {}])[0].get("why") or ""))
        return True, f"ok, over budget ({report.get('warning')}); " + "; ".join(
            r.get("why", "") for r in report["remedies"])
    if o == "refused":
        msg = (report.get("error") or {}).get("message", "")
        if exp.message and not re.search(exp.message, msg):
            return False, f"refused, but the message does not match /{exp.message}/: {msg}"
        if exp.remedy in ("works", "works-if-stated"):
            rem = report.get("remedy") or {}
            if not rem.get("parsed"):
                if exp.remedy == "works-if-stated":
                    return True, f"refused, stating no remedy value (none to verify): {report['reason']}"
                return False, "refused without a remedy value in the message"
            if not rem.get("works"):
                return False, f"refused; the remedy does not work: {rem.get('why')}"
            failing = [r for r in report.get("remedies", [rem]) if not r.get("works")]
            if failing:
                return False, f"refused; {len(failing)} of the stated remedies do not work: {failing[0].get('why')}"
            return True, "refused with remedies that work: " + "; ".join(
                r.get("why", "") for r in report.get("remedies", [rem]))
    return True, f"{o}: {report['reason']}"
