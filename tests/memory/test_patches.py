"""One check per patch: each must fail on the pristine pin and pass on the patched tree.

The checks run the regression scenarios through the harness (real upstream
sizing code, CPU); test_*_fails_on_pristine proves each check can fail.
"""

import re

import pytest

from sgl_overlay.harness import Outcome, load_scenario, parse_remedies

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report, runs

GIB = E.GIB


def check_budget_ledger(tree):
    """A non-positive budget is refused with the ledger and a remedy that works."""
    sc = load_scenario("negative-rest-tp8")
    rep = report(tree, "negative-rest-tp8")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    msg = rep["error"]["message"]
    assert "held outside the model" in msg, msg
    assert "free after weights (min over ranks)" in msg, msg
    rem = rep["remedy"]
    assert rem["parsed"] and rem["parsed"]["flag"] == "--mem-fraction-static", rem
    # the smallest value (3 decimals) leaving one request at the context length
    assert rem["parsed"]["value"] == E.smallest_mfs(sc) == 0.78
    assert rem["works"] and rem["rerun_outcome"] == Outcome.OK, rem["why"]


def check_mamba_spec_reservation(tree):
    """Never 0 requests; what the Mamba pools allocate equals what was reserved."""
    for name in ("zero-requests-dflash", "dflash-smoke", "dflash-default-48"):
        rep = report(tree, name)
        assert rep["outcome"] in (Outcome.OK, Outcome.REFUSED), (name, rep["reason"])
        measured = 0
        for applied, ledger, figures in runs(rep):
            alloc = figures.get("allocation")
            if not alloc:
                continue
            assert ledger, (name, applied, "no ledger")
            res = ledger["reservations"]
            assert alloc["mamba_states_bytes"] == res["mamba_states"]["bytes"], (name, applied, alloc, res)
            assert alloc["speculative_intermediate_states_bytes"] == res["speculative_intermediate_states"]["bytes"]
            measured += 1
        assert measured, f"{name}: no run built its pools"


def check_fit_request_count(tree):
    """The unset speculative default is lowered to the largest count that fits;
    a user's count that does not fit is refused with the largest that would."""
    sc = load_scenario("dflash-default-48")
    rep = report(tree, "dflash-default-48")
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    best = E.largest_fitting(sc)
    assert rep["figures"]["max_running_requests"] == best.requests == 4
    assert not E.fits(sc, E.reserve(sc, best.requests + 1, E.budget_bytes(sc)))
    sc = load_scenario("zero-requests-dflash")
    rep = report(tree, "zero-requests-dflash")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    first = rep["remedies"][0]["parsed"]
    assert (first["flag"], first["value"]) == ("--max-running-requests", E.largest_fitting(sc).requests) == (
        "--max-running-requests", 2)


def check_memory_ledger(tree):
    """The JSON ledger (SGLO_MEMORY_LEDGER) is written for every scenario, and the
    refusal's machine-readable remedy lines parse to the ledger's remedies."""
    for name in SCENARIOS:
        rep = report(tree, name)
        ledger = rep.get("ledger")
        assert ledger and ledger["schema"] == 1, (name, "no ledger")
        assert ledger["outcome"] == rep["outcome"], (name, ledger["outcome"], rep["outcome"])
        if rep["outcome"] == Outcome.REFUSED:
            parsed = [(r.flag, r.value) for r in parse_remedies(rep["error"]["message"])]
            assert parsed == [(r["flag"], r["value"]) for r in ledger["remedies"]], name


CHECKS = [check_budget_ledger, check_mamba_spec_reservation, check_fit_request_count, check_memory_ledger]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
def test_passes_on_patched_tree(patched, check):
    check(patched)


# What each check meets on the pristine pin: the pin's own behaviour, named.
PRISTINE_FAILURES = {
    # the pin's refusal, without the ledger (pool_configurator.py of v0.5.12.post1)
    check_budget_ledger: re.escape("Not enough memory. Please try to increase --mem-fraction-static."),
    # the pin sizes 0 running requests for scenario B2
    check_mamba_spec_reservation: re.escape("('zero-requests-dflash', 'sizing completed with max_running_requests=0')"),
    # the pin refuses the DFlash default of 48 requests instead of lowering it
    check_fit_request_count: r"RuntimeError at sglang/srt/model_executor/pool_configurator\.py:\d+ \(__post_init__\): "
                             r"Not enough memory\.",
    # the pin writes no ledger
    check_memory_ledger: re.escape("('negative-rest-tp8', 'no ledger')"),
}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
def test_fails_on_pristine_pin(pristine, check):
    with pytest.raises(AssertionError, match=PRISTINE_FAILURES[check]):
        check(pristine)
