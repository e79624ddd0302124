"""One check per patch: each must fail on the pristine pin (SGLang v0.5.17) for
its reason and pass on the patched tree.

The checks run the regression scenarios through the harness (real upstream
sizing code, CPU); test_fails_on_pristine_pin proves each check can fail, with
the pin's own behaviour named.  Expectations come from the scenario files
(expected.py) and the Mamba state size the tree's config class gives.
"""

import re

import pytest

from sgl_overlay.harness import Case, Outcome, load_scenario, parse_remedies, run_child, source_root
from sgl_overlay.harness.remedy import from_ledger

from tests.memory import expected as E
from tests.memory.reports import SCENARIOS, report


def check_budget_ledger(tree):
    """A non-positive budget is refused with the ledger (where the memory went)
    and a --mem-fraction-static that leaves one request at the context length."""
    sc = load_scenario("negative-rest-tp8")
    rep = report(tree, "negative-rest-tp8")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    msg = rep["error"]["message"]
    assert "free after weights (min over ranks)" in msg, msg
    assert "held outside the model" in msg, msg
    rem = rep["remedy"]
    assert rem["parsed"] and rem["parsed"]["flag"] == "--mem-fraction-static", rem
    assert rem["works"] and rem["rerun_outcome"] == Outcome.OK, rem["why"]
    context = sc.model["context_len"]
    assert rem["rerun_figures"]["max_total_num_tokens"] >= context, (
        f"{rem['applied']} leaves {rem['rerun_figures']['max_total_num_tokens']} KV tokens, "
        f"less than one {context}-token request")
    assert rem["parsed"]["value"] == E.smallest_mfs_dense(sc)


def check_fit_request_count(tree):
    """The unset speculative default (48) is lowered to the largest count whose
    Mamba states, intermediate states and one verify step of KV cache fit; a
    user's count that does not fit is refused with the largest that would."""
    sc = load_scenario("dflash-default-48")
    rep = report(tree, "dflash-default-48")
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    best = E.largest_fitting(sc)
    f = rep["figures"]
    assert (f["max_running_requests_flag"], f["max_running_requests"], f["max_mamba_cache_size"]) == (
        E.SPEC_DEFAULT_REQUESTS, best.requests, best.slots)
    assert f["max_total_num_tokens"] == best.tokens
    sc = load_scenario("dflash-smoke-tight")
    rep = report(tree, "dflash-smoke-tight")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    want, largest = sc.server["max_running_requests"], E.largest_fitting(sc, sc.server["max_running_requests"] - 1)
    assert f"--max-running-requests {want} does not fit" in rep["error"]["message"], rep["error"]["message"][:300]
    first = rep["remedies"][0]["parsed"]
    assert (first["flag"], first["value"]) == ("--max-running-requests", largest.requests)
    assert all(r["works"] for r in rep["remedies"]), [r["why"] for r in rep["remedies"]]


def check_over_budget_start(tree):
    """The known-good service at the fraction v0.5.14-v0.5.16 need
    (dflash-smoke-raised) starts with the figures of the reservation without the
    padding slots, over budget by them (one state slot and one 16-token
    intermediate slot), the static pools leaving the activation reserve free;
    the warning's remedy re-runs as case fits with at least those figures."""
    sc = load_scenario("dflash-smoke-raised")
    rep = report(tree, "dflash-smoke-raised")
    assert rep["outcome"] == Outcome.OK, rep["reason"]
    ref = E.reserve(sc, sc.server["max_running_requests"], E.budget_bytes(sc), sc.server["max_mamba_cache_size"],
                    padding=False)
    f = rep["figures"]
    assert (f["max_running_requests"], f["max_total_num_tokens"], f["max_mamba_cache_size"]) == (
        ref.requests, ref.tokens, ref.slots)
    led = rep["ledger"]
    assert led and led["figures"]["case"] == Case.OVER_BUDGET, led and led["figures"].get("case")
    per_req, (_, cell) = f["mamba_cache_per_req_bytes"], E.kv_bytes_per_token(sc)
    assert abs(led["figures"]["over_budget_bytes"] - (per_req + E.spec_bytes_per_slot(sc))) <= cell
    rem = rep["remedy"]
    assert rem["works"] and rem["rerun_case"] == Case.FITS, rem["why"]
    rf = rem["rerun_figures"]
    assert (rf["max_running_requests"], rf["max_mamba_cache_size"]) >= (ref.requests, ref.slots)
    assert rf["max_total_num_tokens"] >= ref.tokens


def check_memory_ledger(tree):
    """SGLO_MEMORY_LEDGER: the tree writes its ledger as JSON (the harness reads
    the file; without it the child falls back to the in-memory ledger) and logs
    each figure at INFO; the refusal's remedy lines parse to the file's remedies.  The scenarios in their
    renamed flags' spelling, which the pin takes too (v0.5.23, whose port runs this check, refuses the old)."""
    for name in ("negative-rest-tp8", "dflash-smoke-raised"):
        out = run_child(source_root(tree), load_scenario(name).respelled().to_request())
        written = [r["message"] for r in out.get("log", []) if r["message"].startswith("memory ledger:")]
        assert any(" written to " in m for m in written), (name, "no ledger written")
        assert any(m.startswith("memory ledger: budget_bytes = ") for m in written), (name, written[:5])
        ledger = out["ledger"]
        assert ledger["schema"] == 1 and ledger["outcome"] == ("refused" if out.get("error") else "ok")
        if out.get("error"):
            parsed = [r.changes for r in parse_remedies(out["error"]["message"])]
            assert parsed == [r.changes for r in from_ledger(ledger)], name


def check_combined_remedies(tree):
    """Where no single flag value fits (issue 40's H100 readings: 16 requests with their Mamba and
    speculative states on 80 GB), the refusal states the smallest sets of changes that do, each
    re-run through the same sizing code and started: at most three flags, none of them a single
    flag that starts alone (the pin, and the stack before this patch, state none)."""
    rep = report(tree, "h100-16")
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    checks = rep["remedies"]
    assert checks, f"refused without a remedy: {rep['error']['message'][-300:]}"
    for check in checks:
        parsed = check["parsed"]
        flags = [parsed["flag"], *(a["flag"] for a in parsed.get("also", []))]
        assert 2 <= len(flags) <= 3 and len(set(flags)) == len(flags), parsed
        assert check["works"], check["why"]
    # no single flag of a stated set starts alone: a re-run with each one of them
    first = checks[0]["parsed"]
    for change in [first, *first.get("also", [])]:
        alone = run_child(tree, load_scenario("h100-16").to_request({change["key"]: change["value"]}))
        assert alone.get("error"), (change, "starts alone: not the smallest set")


CHECKS = [check_budget_ledger, check_fit_request_count, check_over_budget_start, check_memory_ledger,
          check_combined_remedies]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
def test_passes_on_patched_tree(patched, check):
    check(patched)


# What each check meets on the pristine pin: the pin's own behaviour, named.
PRISTINE_FAILURES = {
    # the pin's hint (0c065671c9, #28855): no ledger; its value leaves no room for one request
    check_budget_ledger: re.escape("free after weights (min over ranks)' in 'Loaded weights leave no GPU memory"),
    # the pin refuses the speculative default of 48 with a value the command already satisfies
    check_fit_request_count: re.escape("Raise --mem-fraction-static above 0.580"),
    # the pin refuses the known-good service (the padding slots, 59ef3b15cc, #32184)
    check_over_budget_start: re.escape("Raise --mem-fraction-static above 0.580"),
    # the pin writes no ledger
    check_memory_ledger: re.escape("('negative-rest-tp8', 'no ledger written')"),
    # the pin refuses 16 requests on the H100 with its hint "Raise --mem-fraction-static above 0.718"
    # (as the real H100 start-up did, tests/data/gpu_results/2026-12-07/h100-e2e), one flag, which the
    # command's 0.7777 already satisfies
    check_combined_remedies: re.escape("'value': 0.718, 'relation': 'above'"),
}


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[6:])
def test_fails_on_pristine_pin(pristine, check):
    with pytest.raises(AssertionError, match=PRISTINE_FAILURES[check]):
        check(pristine)


def test_the_debug_patch_is_what_writes_the_file(stack_without):
    """The series without memory-ledger.patch: the memory topic keeps its
    in-memory ledger (the harness still reads it), but nothing is written."""
    tree = source_root(stack_without("memory-ledger.patch"))
    out = run_child(tree, load_scenario("negative-rest-tp8").to_request())
    assert out["ledger"] and out["ledger"]["outcome"] == "refused"  # the in-memory ledger
    with pytest.raises(AssertionError, match=re.escape("('negative-rest-tp8', 'no ledger written')")):
        check_memory_ledger(tree)


def test_the_combined_remedies_are_this_patchs(stack_without):
    """The series without memory-where-no-single-flag-fits.patch (and the debug topic's
    memory-ledger.patch, whose lines follow it): the refusal ends "No single flag value fits this
    on this GPU" and states no remedy."""
    tree = source_root(stack_without("memory-where-no-single-flag-fits.patch", "memory-ledger.patch"))
    with pytest.raises(AssertionError, match=r"(?s)refused without a remedy: .*No single flag value fits this on this GPU"):
        check_combined_remedies(tree)
