"""The incident's scenarios on the pin (SGLang v0.5.17) and on the patched tree."""

import pytest

from sgl_overlay.harness import Outcome
from tests.memory.reports import SCENARIOS, report


@pytest.mark.parametrize("name", ["zero-requests-dflash", "dflash-smoke", "dflash-smoke-raised", "dflash-default-48"])
def test_pin_fails(pristine, name):
    """The pin refuses each without a working remedy value: the 0-request case
    with "Try: (1) reduce --max-running-requests ..." and no value, the others
    with "Raise --mem-fraction-static above 0.580", which the command satisfies
    (the Mamba reservation is not in that arithmetic)."""
    rep = report(pristine, name)
    assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    assert rep["passed"] is False, rep["judgement"]


@pytest.mark.parametrize("name", ["dflash-smoke", "dflash-smoke-raised", "dflash-default-48"])
def test_pin_hint_is_already_satisfied(pristine, name):
    from sgl_overlay.harness import load_scenario

    rep = report(pristine, name)
    hint = float(rep["error"]["message"].split("Raise --mem-fraction-static above ")[1].split()[0])
    assert hint < load_scenario(name).server["mem_fraction_static"], (hint, rep["error"]["message"][:200])


# dflash-smoke is the service at the fraction v0.5.12.post1 started it with
# (0.6857): from v0.5.14 the drafter's weights count in the budget (#23862,
# #28855), and even without the padding slots (v0.5.16's reservation) its 4
# requests do not fit there.  The patched pin refuses it with remedies that
# start it; the scenario still expects "ok" (the old pin's verdict, which
# bisect's baselines keep).
REFUSED_WITH_REMEDIES = {"dflash-smoke"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_patched_tree_passes_with_every_remedy_verified(patched, name):
    rep = report(patched, name)
    if name in REFUSED_WITH_REMEDIES:
        assert rep["outcome"] == Outcome.REFUSED, rep["reason"]
    else:
        assert rep["passed"] is True, rep["judgement"]
    if rep["outcome"] == Outcome.REFUSED:
        assert rep["remedies"], "a refusal states its remedies"
        for r in rep["remedies"]:
            assert r["works"] and r["rerun_outcome"] == Outcome.OK, r["why"]
