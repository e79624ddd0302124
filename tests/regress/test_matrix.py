"""The real history, asserted: each release's real sizing code on each scenario.

The expectations are the table in issue 3 ("What the real history must show"),
found by running upstream code; cells the issue left to "measure and record"
carry what the harness measured (docs/regress.md).  SGLO_ALL_RELEASES=1 runs
every release 0.5.5-0.5.23 and writes the result table to SGLO_MATRIX_OUT
(default: build/regress-matrix.md).
"""

import json
import os
from pathlib import Path

import pytest

from sgl_overlay.harness import load_scenario, run_scenario

from .conftest import ALL_RELEASES, CI_RELEASES, all_releases_requested

SCENARIOS = ["negative-rest-tp8", "zero-requests-dflash", "dflash-smoke", "dflash-default-48", "healthy-h200-8b"]

NO_VALUE = {"outcome": "refused", "passed": False, "remedy": None}
NO_DFLASH = {"outcome": "untestable", "passed": None, "reason": "no speculative algorithm 'DFLASH'"}
OK = {"outcome": "ok", "passed": True}
SMOKE = {"outcome": "ok", "passed": True,
         "figures": {"max_mamba_cache_size": 24, "max_total_num_tokens": 11893, "max_running_requests": 4}}
ZERO = {"outcome": "broken", "passed": False,
        "figures": {"max_total_num_tokens": 11893, "max_mamba_cache_size": 2, "max_running_requests": 0}}
ABOVE_0770 = {"outcome": "refused", "passed": True, "remedy": 0.77}
HEALTHY = {"outcome": "ok", "passed": True,
           "figures": {"max_total_num_tokens": 918523, "max_running_requests": 3587}}

SINCE_0_5_14 = {
    "negative-rest-tp8": ABOVE_0770,
    # v0.5.14 no longer forces the overlap scheduler off for DFLASH (scenario doc,
    # section 6 correction): 7 slots, 165,809 tokens, 1 request.
    "zero-requests-dflash": {"outcome": "ok", "passed": True,
                             "figures": {"max_running_requests": 1, "max_total_num_tokens": 165809,
                                         "max_mamba_cache_size": 7}},
    "dflash-smoke": SMOKE,
    "dflash-default-48": {"outcome": "refused", "passed": False, "remedy": 0.542,
                          "remedy_why": "already satisfied"},
    "healthy-h200-8b": HEALTHY,
}

EXPECTED = {
    "0.5.9": {"negative-rest-tp8": NO_VALUE, "zero-requests-dflash": NO_DFLASH, "dflash-smoke": NO_DFLASH,
              "dflash-default-48": NO_DFLASH, "healthy-h200-8b": HEALTHY},
    "0.5.11": {"negative-rest-tp8": NO_VALUE, "zero-requests-dflash": ZERO, "dflash-smoke": SMOKE,
               "dflash-default-48": NO_VALUE, "healthy-h200-8b": HEALTHY},
    "0.5.12.post1": {"negative-rest-tp8": NO_VALUE, "zero-requests-dflash": ZERO, "dflash-smoke": SMOKE,
                     "dflash-default-48": NO_VALUE, "healthy-h200-8b": HEALTHY},
    "0.5.13": {"negative-rest-tp8": NO_VALUE,
               "zero-requests-dflash": {"outcome": "ok", "passed": True,
                                        "figures": {"max_running_requests": 1, "max_total_num_tokens": 169388}},
               "dflash-smoke": SMOKE, "dflash-default-48": NO_VALUE, "healthy-h200-8b": HEALTHY},
    "0.5.14": SINCE_0_5_14,
    # 0.5.16: measured by this harness (the issue says "measure and record"): as 0.5.14.
    "0.5.16": SINCE_0_5_14,
    "0.5.23": {"negative-rest-tp8": ABOVE_0770, "healthy-h200-8b": HEALTHY},
}

RELEASES = ALL_RELEASES if all_releases_requested() else CI_RELEASES
_results: dict = {}


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("version", RELEASES)
def test_release(release_tree, version, scenario):
    report = run_scenario(release_tree(version), load_scenario(scenario))
    _results[(version, scenario)] = report
    _record(version, scenario, report)
    exp = EXPECTED.get(version, {}).get(scenario)
    if exp is None:
        # Not asserted: v0.5.23's DFlash cells end in an upstream assertion about the
        # fused-draft host-kind registry, which a stubbed module populates; not yet
        # trusted (docs/regress.md, "Open points").  Recorded only.
        return
    assert report["outcome"] == exp["outcome"], report["reason"]
    assert report["passed"] == exp["passed"], report["judgement"]
    for key, value in exp.get("figures", {}).items():
        assert report["figures"].get(key) == value, (key, report["figures"])
    if "reason" in exp:
        assert exp["reason"] in report["reason"]
    if "remedy" in exp:
        parsed = (report.get("remedy") or {}).get("parsed")
        if exp["remedy"] is None:
            assert parsed is None, parsed
        else:
            assert parsed and parsed["value"] == pytest.approx(exp["remedy"]), report.get("remedy")
    if "remedy_why" in exp:
        assert exp["remedy_why"] in report["remedy"]["why"]


def _record(version, scenario, report):
    """Append one cell to the matrix file (read by docs tooling / humans)."""
    if not all_releases_requested():
        return
    out = Path(os.environ.get("SGLO_MATRIX_OUT", "build/regress-matrix.jsonl"))
    out.parent.mkdir(parents=True, exist_ok=True)
    f = report["figures"]
    row = {"version": version, "scenario": scenario, "outcome": report["outcome"], "passed": report["passed"],
           "tokens": f.get("max_total_num_tokens"), "requests": f.get("max_running_requests"),
           "mamba": f.get("max_mamba_cache_size"), "reason": report["reason"][:200],
           "remedy": (report.get("remedy") or {}).get("why"), "wall_s": report["timing"].get("wall_s")}
    with out.open("a") as fh:
        fh.write(json.dumps(row) + "\n")
