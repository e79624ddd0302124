"""Pure parts of the harness: remedy parsing, outcome classification, scenarios."""

import pytest

from sgl_overlay.harness import ScenarioError, classify, load_scenario, parse_remedy, scenario_names
from sgl_overlay.harness.run import judge


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
    assert classify(_done(11893, 4, 24))["outcome"] == "ok"
    assert classify(_done(11893, 0, 2))["outcome"] == "broken"
    assert classify(_done(-84378, 10))["outcome"] == "broken"
    assert classify(_done(100, 1, 0))["outcome"] == "broken"


def _err(**kw):
    e = {"type": "RuntimeError", "kind": "exception", "origin": "tree", "where": "x.py:1", "message": "m",
         "stub_involved": False}
    e.update(kw)
    return {"completed": False, "error": e}


def test_classify_errors():
    assert classify(_err())["outcome"] == "refused"
    assert classify(_err(type="ValueError"))["outcome"] == "refused"
    assert classify(_err(type="AssertionError"))["outcome"] == "broken"
    assert classify(_err(type="TypeError"))["outcome"] == "untestable"
    assert classify(_err(origin="standin"))["outcome"] == "untestable"
    assert classify(_err(kind="missing-input", type="MissingInput"))["outcome"] == "untestable"
    assert classify(_err(stub_involved=True))["outcome"] == "untestable"


def test_judge_needs_a_working_remedy():
    sc = load_scenario("negative-rest-tp8")
    base = {"outcome": "refused", "reason": "r", "error": {"message": "Raise --mem-fraction-static above 0.770"}}
    assert judge(sc, dict(base, remedy={"parsed": {"x": 1}, "works": True, "why": "ok"}))[0] is True
    assert judge(sc, dict(base, remedy={"parsed": {"x": 1}, "works": False, "why": "no"}))[0] is False
    assert judge(sc, dict(base, remedy={"parsed": None, "works": False}))[0] is False
    assert judge(sc, {"outcome": "untestable", "reason": "r"})[0] is None


def test_judge_works_if_stated_passes_a_refusal_without_a_value():
    sc = load_scenario("hint-excludes-mamba")
    base = {"outcome": "refused", "reason": "r", "error": {"message": "Not enough memory."}}
    assert judge(sc, dict(base, remedy={"parsed": None, "works": False}))[0] is True
    failing = {"parsed": {"x": 1}, "works": False, "why": "re-run with --mem-fraction-static 0.542: refused"}
    ok, why = judge(sc, dict(base, remedy=failing, remedies=[failing]))
    assert ok is False and "0.542: refused" in why


def test_judge_checks_the_expected_figures_of_an_ok_run():
    sc = load_scenario("max-running-lowered")
    assert sc.expect.figures == {"max_running_requests": 4}
    run = {"outcome": "ok", "reason": "r", "figures": {"max_running_requests": 4}}
    assert judge(sc, run)[0] is True
    ok, why = judge(sc, dict(run, figures={"max_running_requests": 3}))
    assert ok is False and "max_running_requests is 3, not 4" in why


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
    assert classify(child)["outcome"] == "refused"
    assert classify(_err(type="Oops", mro=["Oops", "Exception"]))["outcome"] == "untestable"


def test_judge_needs_every_stated_remedy_to_work():
    sc = load_scenario("zero-requests-dflash")
    good = {"parsed": {"x": 1}, "works": True, "why": "ok"}
    bad = {"parsed": {"x": 2}, "works": False, "why": "re-run broken"}
    base = {"outcome": "refused", "reason": "r", "error": {"message": "m"}, "remedy": good}
    assert judge(sc, dict(base, remedies=[good, good]))[0] is True
    passed, why = judge(sc, dict(base, remedies=[good, bad]))
    assert passed is False and "re-run broken" in why
