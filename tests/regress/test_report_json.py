"""The shape of `tools/regress.py --json` (docs/regress.md, "The JSON report"),
pinned against real scenario runs on the pin and on the patched tree: the keys
and their order for each outcome, the remedy checks' keys for each way a
remedy is checked, and `passed` / `exit_code` against the exit status."""

import json

import pytest

from sgl_overlay.commands import regress as regress_cmd
from sgl_overlay.harness import Outcome, RemedyCheck, parse_remedy

# Every report starts with these, in this order (docs/regress.md).
COMMON = ["scenario", "tree", "version", "layout", "outcome", "reason", "figures", "error", "notes",
          "drafter_reading", "readings", "range", "timing", "reads", "ledger", "log", "environment"]
# then, in every report (null where not checked: docs/json.md), and the envelope of every --json document
CHECKS = ["remedy", "remedies", "case", "warning"]
END = ["passed", "judgement", "exit_code", "schema"]
PARSED = ["flag", "key", "value", "relation", "source"]
RERUN = ["parsed", "current", "applied", "rerun_outcome", "rerun_reason", "rerun_figures", "rerun_ledger",
         "works", "why"]
ERROR = ["type", "message", "kind", "origin", "where", "traceback"]
PASSED = {0: True, 1: False, 125: None}


def _regress(capsys, tree, scenario, *more):
    code = regress_cmd.main(["--tree", str(tree), "--scenario", scenario, "--json", *more])
    out = capsys.readouterr().out
    report = json.loads(out)
    assert report["exit_code"] == code and report["schema"] == 1 and report["passed"] is PASSED[code], (code, report["judgement"])
    return report


def test_a_refusal_stating_no_value(capsys, pristine_tree):
    """The pin refuses zero-requests-dflash with "Try: (1) reduce --max-running-requests,
    (2) increase --mem-fraction-static ...": no value."""
    r = _regress(capsys, pristine_tree, "zero-requests-dflash")
    assert list(r) == COMMON + CHECKS + END
    assert r["outcome"] == "refused" and r["exit_code"] == 1 and r["case"] is None and r["ledger"] is None
    assert list(r["error"]) == ERROR and r["error"]["origin"] == "tree"
    assert r["remedy"] == {"parsed": None, "works": False, "why": "the message states no flag value"}
    assert r["remedies"] == []


def test_a_refusal_whose_value_is_already_satisfied(capsys, pristine_tree):
    """The pin refuses dflash-smoke with "Raise --mem-fraction-static above 0.580",
    which the scenario's 0.6857 already meets: looked up, not re-run."""
    r = _regress(capsys, pristine_tree, "dflash-smoke")
    assert list(r) == COMMON + CHECKS + END
    assert r["outcome"] == "refused" and r["exit_code"] == 1
    check = r["remedy"]
    assert list(check) == ["parsed", "current", "works", "why"] and list(check["parsed"]) == PARSED
    assert check["parsed"]["flag"] == "--mem-fraction-static" and check["parsed"]["relation"] == "above"
    assert check["current"] > check["parsed"]["value"] and check["works"] is False


def test_a_broken_sizing_has_null_remedy_keys(capsys):
    """v0.5.12.post1 (the pin until v0.5.17) sized zero-requests-dflash to 0 running
    requests; from v0.5.13 (dea85c30f4) no release does."""
    from sgl_overlay import release_trees

    r = _regress(capsys, release_trees.release_tree("0.5.12.post1"), "zero-requests-dflash")
    assert list(r) == COMMON + CHECKS + END
    assert r["outcome"] == "broken" and r["error"] is None and r["figures"]["max_running_requests"] == 0


def test_a_refusal_whose_remedies_are_re_run(capsys, patched_tree):
    """The patched tree refuses zero-requests-dflash (case cannot_run) with two remedy lines, each re-run."""
    r = _regress(capsys, patched_tree, "zero-requests-dflash")
    assert list(r) == COMMON + CHECKS + END
    assert r["outcome"] == "refused" and r["case"] == "cannot_run" and r["exit_code"] == 0
    assert len(r["remedies"]) >= 1 and r["remedy"] == r["remedies"][0]
    for check in r["remedies"]:
        assert list(check) == RERUN and list(check["parsed"]) == PARSED
        assert check["applied"] == {check["parsed"]["key"]: check["parsed"]["value"]}
        assert check["works"] is (check["rerun_outcome"] == "ok")
        assert check["why"].startswith(f"re-run with {check['parsed']['flag']} {check['parsed']['value']}: "
                                       f"{check['rerun_outcome']} (")


def test_remedies_not_verified(capsys, patched_tree):
    r = _regress(capsys, patched_tree, "zero-requests-dflash", "--no-remedy")
    assert r["outcome"] == "refused" and r["remedies"]
    for check in r["remedies"]:
        assert list(check) == ["parsed", "works", "why"] and list(check["parsed"]) == PARSED
        assert check["works"] is None and check["why"] == "not verified"


def test_an_over_budget_start(capsys, patched_tree):
    """The patched tree starts dflash-smoke-raised over budget with a warning; its remedy must re-run as case fits."""
    r = _regress(capsys, patched_tree, "dflash-smoke-raised")
    assert list(r) == COMMON + CHECKS + END
    assert r["outcome"] == "ok" and r["case"] == "over_budget" and r["exit_code"] == 0
    assert r["warning"] == r["ledger"]["reason"] and "over budget by" in r["warning"]
    assert r["remedies"] and r["remedy"] == r["remedies"][0]
    for check in r["remedies"]:
        assert list(check) == RERUN + ["rerun_case"]
        assert check["rerun_case"] == (check["rerun_ledger"] or {}).get("figures", {}).get("case")
        assert check["works"] is (check["rerun_outcome"] == "ok" and check["rerun_case"] == "fits")
        assert check["why"].endswith(f", case {check['rerun_case']}")


@pytest.mark.parametrize("current", [0.8, None])
def test_a_remedy_already_satisfied_is_looked_up_not_re_run(current):
    """A stated "above X" the scenario already meets is not re-run: `current` without the re-run keys.
    (No scenario of the CI matrix states one on its releases; the shape is the RemedyCheck's own.)"""
    remedy = parse_remedy("Raise --mem-fraction-static above 0.770")
    check = RemedyCheck(remedy, False, "already satisfied", looked_up=True, current=current)
    assert list(check.to_json()) == ["parsed", "current", "works", "why"]
    assert check.to_json()["current"] == current and list(check.to_json()["parsed"]) == PARSED


def test_a_start_within_the_budget(capsys, pristine_tree):
    """The pin starts healthy-h200-8b (no ledger, so no case): the remedy keys null; the outcome is the Outcome's word."""
    r = _regress(capsys, pristine_tree, "healthy-h200-8b")
    assert list(r) == COMMON + CHECKS + END
    assert (r["remedy"], r["remedies"], r["warning"]) == (None, None, None)
    assert r["outcome"] == Outcome.OK.value and r["case"] is None and r["exit_code"] == 0
