"""The real history, asserted: each release's real sizing code on each scenario.

Every expectation comes from ``oracle.py``: an independent re-derivation of
each cell from the scenario's numbers and the formulas of the release's code
read by hand (docs/results/regress.md, "The oracle: each cell re-derived"; the
release boundaries it uses are checked against the releases' source by
``test_oracle.py``), never from this harness's output.  It gives the outcome,
the figures (Mamba slots, KV tokens, running requests), the reason, the value a
refusal names, whether that remedy works and the re-run's figures, and the
scenario's judgement.  A cell the oracle cannot derive would be listed in
``NOT_DERIVED`` (an xfail with its reason); there is none today.
SGLO_ALL_RELEASES=1 runs every release 0.5.5-0.5.23 and writes the result
table to SGLO_MATRIX_OUT (default: build/regress-matrix.jsonl).
"""

import json
import os
from pathlib import Path

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario

from . import oracle
from .conftest import ALL_RELEASES, CI_RELEASES, all_releases_requested

SCENARIOS = ["negative-rest-tp8", "zero-requests-dflash", "dflash-smoke", "dflash-default-48", "healthy-h200-8b",
             "dflash-smoke-raised"]

# Cells the oracle cannot derive: (version, scenario) -> reason.  Each is an
# xfail (strict: a harness that comes to agree with the oracle must remove it).
NOT_DERIVED: dict = {}

RELEASES = ALL_RELEASES if all_releases_requested() else CI_RELEASES


def _cells():
    for version in RELEASES:
        for scenario in SCENARIOS:
            marks = ()
            if (version, scenario) in NOT_DERIVED:
                marks = (pytest.mark.xfail(strict=True, reason=NOT_DERIVED[(version, scenario)]),)
            yield pytest.param(version, scenario, marks=marks, id=f"{version}-{scenario}")


@pytest.mark.parametrize("version,scenario", list(_cells()))
def test_release(release_tree, version, scenario):
    exp = oracle.expect(version, scenario)
    want = Outcome(exp.outcome)  # the oracle imports nothing of the harness: its outcome is a word
    report = run_scenario(release_tree(version), load_scenario(scenario))
    _record(version, scenario, report)
    assert report.outcome is want, report.reason
    if exp.reason:
        assert exp.reason in report.reason, (exp.reason, report.reason)
    if want is Outcome.UNTESTABLE:
        return
    assert report.passed == exp.passed, report.judgement
    figures = dict(exp.figures)
    rerun = figures.pop("rerun", None)
    for key, value in figures.items():
        assert report.figures.get(key) == value, (key, value, report.figures.get(key))
    remedy = report.remedy
    parsed = remedy.parsed.value if remedy and remedy.parsed else None
    if want is Outcome.REFUSED:
        assert parsed == (pytest.approx(exp.remedy) if exp.remedy is not None else None), remedy
        assert bool(remedy.works) == bool(exp.remedy_works), remedy
        if exp.remedy is not None and exp.remedy_works is None:
            # looked up, not re-run: the scenario's value already meets the stated one
            assert remedy.looked_up and remedy.rerun is None and "already satisfied" in remedy.why, remedy
    for key, value in (rerun or {}).items():
        assert (remedy.rerun.figures if remedy and remedy.rerun else {}).get(key) == value, (key, value, remedy)


def _record(version, scenario, report):
    """Append one cell to the matrix file (read by docs tooling / humans)."""
    if not all_releases_requested():
        return
    out = Path(os.environ.get("SGLO_MATRIX_OUT", "build/regress-matrix.jsonl"))
    out.parent.mkdir(parents=True, exist_ok=True)
    f = report.figures
    row = {"version": version, "scenario": scenario, "outcome": report.outcome, "passed": report.passed,
           "tokens": f.get("max_total_num_tokens"), "requests": f.get("max_running_requests"),
           "mamba": f.get("max_mamba_cache_size"), "reason": report.reason[:200],
           "remedy": report.remedy.why if report.remedy else None, "wall_s": report.timing.get("wall_s")}
    with out.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
