"""Parent side: run a scenario on a tree in a fresh interpreter, verify remedies, judge.

The child (``harness/child``) is only started, never imported: its result is read through
``protocol`` (``SizingResult``, ``FlagsResult``)."""

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
from . import zygote
from . import outcome as outcome_mod
from .case import Case
from .judgement import judge
from .outcome import Outcome
from .protocol import ErrorKind, ErrorRecord, FlagsResult, Job, SizingResult
from .remedy import Relation, Remedy, from_ledger, parse_remedies
from .readings import End
from .report import EndRun, Findings, RemedyCheck, Report, Rerun
from .scenario import Scenario

from ..extras import MissingDependency, require, third_party_missing


def run_child(root: Path, request: dict, timeout: float = 120.0,
              module: str = "sgl_overlay.harness.child", path: tuple = (), launch=None) -> dict:
    """One fresh interpreter, one sizing run; returns the child's JSON.

    ``module`` is the child entry point (``python -m MODULE``, request JSON on
    stdin, one result JSON line on stdout): the harness's child (its jobs: ``protocol.Job``), or a
    test's own.
    ``path``: folders put first on the child's sys.path (a test's own child module);
    the current directory never is (``-P``), so a folder the user stands in cannot
    shadow a module the child imports.
    ``launch`` runs it, with ``subprocess.run``'s arguments and result (a caller
    that must be able to stop its children, such as bisect, passes its own);
    by default a fork of a zygote that has imported torch already (zygote.py).

    The child inherits this process's environment, as a server started from the same shell
    would: the SGLang settings in it (``SGLANG_*``) are honoured, and the result names them
    (``environment``, environment.py)."""
    require("harness", "the regression harness")
    launch = launch or zygote.run
    req = dict(request, root=str(root))
    env = dict(os.environ)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *filter(None, [env.get("PYTHONPATH")])])
    t = time.perf_counter()
    proc = launch(
        [sys.executable, "-P", "-m", module],
        input=json.dumps(req),
        capture_output=True,
        text=True,
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
            "error": ErrorRecord.child_failed(proc.returncode, proc.stderr).to_json(),
            "timing": {"wall_s": round(wall, 4)},
            "environment": settings,
        }
    result = json.loads(lines[-1])
    err = result.get("error")
    _stop_on_missing_package(root, ErrorRecord.parse(err) if isinstance(err, dict) else None, "")
    result.setdefault("timing", {})["wall_s"] = round(wall, 4)
    result["stderr_tail"] = proc.stderr[-2000:]
    result["environment"] = settings
    return result


def run_sizing(root: Path, request: dict, launch=None) -> SizingResult:
    """One sizing run (``Job.SIZING``) of the request on the tree at ``root``, as read."""
    return SizingResult.parse(run_child(root, dict(request, job=Job.SIZING.value), launch=launch))


def run_flags(root: Path, argv: list[str]) -> FlagsResult:
    """SGLang's server flags ``argv`` parsed by the tree's own ServerArgs (``Job.FLAGS``, child/flags.py)."""
    return FlagsResult.parse(run_child(root, {"job": Job.FLAGS.value, "argv": list(argv)}))


def _stop_on_missing_package(root, err: ErrorRecord | None, stderr: str) -> None:
    """A package missing from this environment stops the run (exit 2,
    naming it): neither the tree nor the scenario is at fault.  ``err`` is a
    completed child's error record, ``stderr`` a child's that ended without a result."""
    package = err.package if err is not None and err.kind is ErrorKind.ENVIRONMENT else None
    if package is None and stderr:
        m = re.search(r"^ModuleNotFoundError: No module named '([\w.]+)'", stderr, re.M)
        package = third_party_missing(m.group(1)) if m else None
    if package:
        where = (err.where if err is not None else None) or "the harness's child interpreter"
        raise MissingDependency(package, f"running {layout_mod.version_of(root) or root}'s sizing code ({where})")


# Halvings of the span that place a step of the Mamba slot count (below): 1/4096 of the span, less budget
# than one KV cell for every span the readings model gives (at most 2 x 0.01 GiB of rounding and 140 MiB of
# stream pool), so the KV tokens found either side of a step are those of the step itself
SPAN_DEPTH = 12


def _slots(child: SizingResult):
    c = outcome_mod.classify(child)
    return child.figures.get("max_mamba_cache_size") if c.outcome is Outcome.OK else None


def run_span(root: Path, request: dict, both: bool = True, launch=None) -> list[SizingResult]:
    """The sizing along the readings' span (readings.py): ``[pessimistic end, optimistic end, runs either
    side of each step]``, child results; one run (the pessimistic end) where the readings are exact or
    ``both`` is false.  The budget grows along the span, and with it the KV tokens, except where the
    release's hybrid sizing adds a Mamba slot, whose state the tokens then lose: where the ends' slot
    counts differ, each step is placed by bisection (``SPAN_DEPTH``) and the runs on both sides of it
    are kept, so the figures' least and most values over the span are among the runs."""
    first = run_sizing(root, dict(request, span_at=End.PESSIMISTIC.position), launch=launch)
    derived = first.readings or {}
    if not both or not derived or derived.get("exact"):
        return [first]
    last = run_sizing(root, dict(request, span_at=End.OPTIMISTIC.position), launch=launch)

    def steps(t0, r0, t1, r1, depth):
        if None in (_slots(r0), _slots(r1)) or _slots(r0) == _slots(r1):
            return []
        if depth == 0:
            return [r0, r1]
        tm = (t0 + t1) / 2
        rm = run_sizing(root, dict(request, span_at=tm), launch=launch)
        return steps(t0, r0, tm, rm, depth - 1) + steps(tm, rm, t1, r1, depth - 1)

    return [first, last] + steps(0.0, first, 1.0, last, SPAN_DEPTH)


def run_scenario(tree: str | Path, scenario: Scenario, verify_remedy: bool = True,
                 measure_allocation: bool = False, launch=None) -> Report:
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
    child, *others = run_span(root, request, launch=launch)
    c = outcome_mod.classify(child)
    ledger = child.ledger
    case = Case.of(ledger)
    remedy, remedies, warning = None, (), None
    if c.outcome is Outcome.REFUSED:
        remedy, remedies = _check_remedies(
            root, scenario, parse_remedies(c.message or ""), verify_remedy, measure_allocation,
            None, "the message states no flag value", launch)
    elif c.outcome is Outcome.OK and case is Case.OVER_BUDGET:
        # Started over budget (docs/memory.md, case 2): the warning's remedy
        # must reserve the pools properly, i.e. re-run as case "fits".
        warning = ledger.get("reason")
        stated = from_ledger(ledger)
        remedy, remedies = _check_remedies(root, scenario, stated, verify_remedy, measure_allocation,
                                           Case.FITS, "the warning states no flag value", launch)
    found = Findings(
        scenario=scenario.name,
        tree=str(root),
        version=layout_mod.version_of(root),
        layout=lay.era,
        outcome=c.outcome,
        reason=c.reason,
        figures=child.figures,
        error=child.error.public() if child.error else None,
        notes=child.notes,
        # from v0.5.14 the sizing's reading holds the drafter's weights (draft_reading.py)
        drafter_reading=child.drafter_reading,
        # the sizing's readings (readings.py) and, where they span a width, the run at the other end
        readings=child.readings,
        optimistic=EndRun.of(others[0]) if others else None,
        inside=tuple(EndRun.of(x) for x in others[1:]),
        timing=child.timing,
        reads=child.reads,
        ledger=ledger,
        log=child.log,
        # the SGLang settings (SGLANG_*) the child ran under: the caller's, honoured as the server would
        environment=child.environment,
        case=case,
        remedy=remedy,
        remedies=remedies,
        warning=warning,
    )
    return Report.of(found, *judge(scenario, found))


def _check_remedies(root: Path, scenario: Scenario, stated: list[Remedy], verify: bool,
                    measure_allocation: bool, want_case: Case | None,
                    none_stated: str, launch=None) -> tuple[RemedyCheck, tuple[RemedyCheck, ...]]:
    """(the first check, or why there is none; every check), each remedy re-run if ``verify``."""
    checked = tuple(_verify(root, scenario, r, measure_allocation, want_case, launch) if verify
                    else RemedyCheck.not_verified(r) for r in stated)
    return (checked[0] if checked else RemedyCheck.none_stated(none_stated)), checked


def _verify(root: Path, scenario: Scenario, remedy: Remedy,
            measure_allocation: bool = False, want_case: Case | None = None,
            launch=None) -> RemedyCheck:
    current = scenario.server.get(remedy.key)
    if remedy.relation is Relation.ABOVE and isinstance(current, (int, float)) and current >= remedy.value:
        return RemedyCheck(remedy, False, f"already satisfied: {remedy.key} is {current}, "
                           f"not below the suggested {remedy.value}; applying it cannot help",
                           looked_up=True, current=current)
    if remedy.relation is Relation.BELOW and isinstance(current, (int, float)) and current <= remedy.value:
        return RemedyCheck(remedy, False, f"already satisfied: {remedy.key} is {current} <= {remedy.value}",
                           looked_up=True, current=current)
    request = scenario.to_request(remedy.changes)
    if measure_allocation:
        request["measure_allocation"] = True
    rerun = run_sizing(root, request, launch=launch)
    v = outcome_mod.classify(rerun)
    again = Rerun(remedy.changes, v.outcome, v.reason, rerun.figures, rerun.ledger,
                  Case.of(rerun.ledger), want_case is not None)
    works = v.outcome is Outcome.OK
    why = f"re-run with {remedy.flags}: {v.outcome} ({v.reason})"
    if want_case is not None:
        works = works and again.case is want_case
        why += f", case {again.case}"
    return RemedyCheck(remedy, works, why, looked_up=True, current=current, rerun=again)
