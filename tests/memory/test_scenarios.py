"""The issue's "Must show": the five scenarios on the pin and on the patched tree."""

import pytest

from sgl_overlay.harness import Outcome
from tests.memory.reports import SCENARIOS, report


@pytest.mark.parametrize("name", ["negative-rest-tp8", "zero-requests-dflash", "dflash-default-48"])
def test_pin_fails(pristine, name):
    rep = report(pristine, name)
    assert rep["passed"] is False, rep["judgement"]


def test_pin_passes_dflash_smoke(pristine):
    rep = report(pristine, "dflash-smoke")
    assert rep["passed"] is True, rep["judgement"]
    f = rep["figures"]
    assert (f["max_mamba_cache_size"], f["max_total_num_tokens"], f["max_running_requests"]) == (24, 11893, 4)


@pytest.mark.parametrize("name", SCENARIOS)
def test_patched_tree_passes_with_every_remedy_verified(patched, name):
    rep = report(patched, name)
    assert rep["passed"] is True, rep["judgement"]
    if rep["outcome"] == Outcome.REFUSED:
        assert rep["remedies"], "a refusal states its remedies"
        for r in rep["remedies"]:
            assert r["works"] and r["rerun_outcome"] == Outcome.OK, r["why"]
