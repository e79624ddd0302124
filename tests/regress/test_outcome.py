"""Pure parts of the harness: remedy parsing, outcome classification, scenarios."""

import re

import pytest

from sgl_overlay.harness import (Findings, Outcome, RemedyCheck, Result, ScenarioError, classify, judge,
                                  load_scenario, parse_remedy, scenario_names)


def test_parses_upstream_mem_fraction_remedy():
    msg = (
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.55. "
        "Raise --mem-fraction-static above 0.770 (minimum viable = 1 - available/pre = 0.7691)."
    )
    r = parse_remedy(msg)
    assert (r.flag, r.key, r.value, r.relation) == ("--mem-fraction-static", "mem_fraction_static", 0.77, "above")


def test_parses_machine_readable_remedy_line():
    r = parse_remedy("Not enough memory.\nremedy: --max-running-requests = 3")
    assert (r.key, r.value, r.relation) == ("max_running_requests", 3, "set")


@pytest.mark.parametrize(
    "msg",
    [
        "Not enough memory. Please try to increase --mem-fraction-static.",
        "Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.55",
        "Hybrid (mamba/linear-attention) state cache is too small to serve any requests.",
    ],
)
def test_messages_without_a_value_have_no_remedy(msg):
    assert parse_remedy(msg) is None


def _done(tokens, reqs, slots=None):
    return {"completed": True, "figures": {"max_total_num_tokens": tokens, "max_running_requests": reqs,
                                           "max_mamba_cache_size": slots}}


def test_classify_completed_runs():
    assert classify(_done(11893, 4, 24)).outcome is Outcome.OK
    assert classify(_done(11893, 0, 2)).outcome is Outcome.BROKEN
    assert classify(_done(-84378, 10)).outcome is Outcome.BROKEN
    assert classify(_done(100, 1, 0)).outcome is Outcome.BROKEN


def _err(**kw):
    e = {"type": "RuntimeError", "kind": "exception", "origin": "tree", "where": "x.py:1", "message": "m",
         "stub_involved": False}
    e.update(kw)
    return {"completed": False, "error": e}


def test_classify_errors():
    assert classify(_err()).outcome is Outcome.REFUSED
    assert classify(_err(type="ValueError")).outcome is Outcome.REFUSED
    assert classify(_err(type="AssertionError")).outcome is Outcome.BROKEN
    assert classify(_err(type="TypeError")).outcome is Outcome.UNTESTABLE
    assert classify(_err(origin="standin")).outcome is Outcome.UNTESTABLE
    assert classify(_err(kind="missing-input", type="MissingInput")).outcome is Outcome.UNTESTABLE
    assert classify(_err(stub_involved=True)).outcome is Outcome.UNTESTABLE


def _found(outcome, **kw):
    """Findings of a run as the judge sees them; ``remedy`` alone stands for ``remedies=[remedy]``."""
    if "remedy" in kw and "remedies" not in kw and kw["remedy"] is not None and kw["remedy"].parsed is not None:
        kw["remedies"] = (kw["remedy"],)
    return Findings(scenario="s", tree="t", layout="x", outcome=outcome, reason=kw.pop("reason", "r"), **kw)


PARSED = parse_remedy("Raise --mem-fraction-static above 0.770")


def test_judge_needs_a_working_remedy():
    sc = load_scenario("negative-rest-tp8")
    err = {"message": "Raise --mem-fraction-static above 0.770"}
    assert judge(sc, _found(Outcome.REFUSED, error=err, remedy=RemedyCheck(PARSED, True, "ok")))[0] is Result.PASS
    assert judge(sc, _found(Outcome.REFUSED, error=err, remedy=RemedyCheck(PARSED, False, "no")))[0] is Result.FAIL
    assert judge(sc, _found(Outcome.REFUSED, error=err,
                            remedy=RemedyCheck.none_stated("the message states no flag value")))[0] is Result.FAIL
    assert judge(sc, _found(Outcome.UNTESTABLE))[0] is Result.UNTESTABLE


def test_judge_works_if_stated_passes_a_refusal_without_a_value():
    sc = load_scenario("hint-excludes-mamba")
    err = {"message": "Not enough memory."}
    assert judge(sc, _found(Outcome.REFUSED, error=err,
                            remedy=RemedyCheck.none_stated("the message states no flag value")))[0] is Result.PASS
    failing = RemedyCheck(PARSED, False, "re-run with --mem-fraction-static 0.542: refused")
    result, why = judge(sc, _found(Outcome.REFUSED, error=err, remedy=failing))
    assert result is Result.FAIL and "0.542: refused" in why


def test_judge_checks_the_expected_figures_of_an_ok_run():
    sc = load_scenario("max-running-lowered")
    assert sc.expect.figures == {"max_running_requests": 4}
    assert judge(sc, _found(Outcome.OK, figures={"max_running_requests": 4}))[0] is Result.PASS
    result, why = judge(sc, _found(Outcome.OK, figures={"max_running_requests": 3}))
    assert result is Result.FAIL and "max_running_requests is 3, not 4" in why


def test_judge_names_the_passing_outcomes_as_the_scenario_lists_them():
    sc = load_scenario("negative-rest-tp8")
    result, why = judge(sc, _found(Outcome.BROKEN, reason="sizing completed with max_total_num_tokens=-1"))
    assert result is Result.FAIL
    assert why == (f"broken is not among the passing outcomes {[str(o) for o in sc.expect.passing]}: "
                   "sizing completed with max_total_num_tokens=-1")
    assert "Outcome" not in why


def test_a_scenario_with_an_unknown_outcome_names_the_file_and_the_choices(tmp_path):
    text = load_scenario("negative-rest-tp8").path.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(re.sub(r"(?m)^pass\s*=.*$", 'pass = ["fine"]', text))
    with pytest.raises(ScenarioError, match=r"bad\.toml: an \[expect\] pass outcome is 'fine', not one of "
                                            r'"ok", "broken", "refused", "untestable"'):
        load_scenario(str(bad))


def test_every_scenario_loads_and_states_its_sources():
    names = scenario_names()
    assert {"negative-rest-tp8", "zero-requests-dflash", "dflash-smoke", "dflash-default-48",
            "healthy-h200-8b"} <= set(names)
    for name in names:
        sc = load_scenario(name)
        text = sc.path.read_text()
        for line in text.splitlines():
            if line.strip().startswith(("pre_load_free_gib", "post_load_free_gib", "mem_fraction_static")):
                assert "#" in line, f"{sc.path}: figure without a source comment: {line}"


def test_unknown_scenario_is_a_usage_error():
    with pytest.raises(ScenarioError, match="unknown scenario"):
        load_scenario("no-such-scenario")


def test_every_machine_readable_remedy_line_is_parsed_in_order():
    from sgl_overlay.harness import parse_remedies

    msg = ("Not enough GPU memory to start: ...\nremedy: --max-running-requests = 3\n"
           "remedy: --max-mamba-cache-size = 4\nremedy: --mem-fraction-static = 0.73\n")
    got = [(r.key, r.value, r.relation) for r in parse_remedies(msg)]
    assert got == [("max_running_requests", 3, "set"), ("max_mamba_cache_size", 4, "set"),
                   ("mem_fraction_static", 0.73, "set")]
    # a remedy word inside prose is not the machine-readable line
    assert parse_remedies("the remedy: --x = 1 is not at the start of a line") == []


def test_a_tree_exception_subclass_of_runtimeerror_is_a_refusal():
    child = _err(type="MemoryBudgetError", mro=["MemoryBudgetError", "RuntimeError", "Exception"])
    assert classify(child).outcome is Outcome.REFUSED
    assert classify(_err(type="Oops", mro=["Oops", "Exception"])).outcome is Outcome.UNTESTABLE


def test_judge_needs_every_stated_remedy_to_work():
    sc = load_scenario("zero-requests-dflash")
    good = RemedyCheck(PARSED, True, "ok")
    bad = RemedyCheck(parse_remedy("remedy: --max-running-requests = 2"), False, "re-run broken")
    err = {"message": "m"}
    assert judge(sc, _found(Outcome.REFUSED, error=err, remedy=good, remedies=(good, good)))[0] is Result.PASS
    result, why = judge(sc, _found(Outcome.REFUSED, error=err, remedy=good, remedies=(good, bad)))
    assert result is Result.FAIL and "re-run broken" in why
