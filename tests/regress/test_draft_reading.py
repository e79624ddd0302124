"""The drafter's weights in the sizing's reading (harness/draft_reading.py): from v0.5.14
(sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855) the scheduler starts the drafter before it sizes the KV cache.

The order each release has was read by hand in its ``managers/scheduler.py``:
``Scheduler.init_model_worker`` calls ``maybe_init_draft_worker()`` and then
``init_memory_pools()`` from v0.5.14 (v0.5.14 lines 859-868); up to v0.5.13.post1 the target's
``ModelRunner`` sizes its pools in its own initialisation and the scheduler has no
``init_memory_pools``.  The amounts below follow from the sizing's formula, rest = reading -
pre x (1 - mem_fraction_static), not from the harness's output."""

import copy

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario
from sgl_overlay.harness.draft_reading import decide, drafter_loads_before_sizing, overstated
from sgl_overlay.harness.scenario import ScenarioError, load as load_file

GIB = 1 << 30


@pytest.mark.parametrize("version,first", [("0.5.12.post1", False), ("0.5.13.post1", False),
                                           ("0.5.14", True), ("0.5.16", True), ("0.5.17", True), ("0.5.23", True)])
def test_the_order_is_read_from_the_releases_scheduler(release_tree, version, first):
    assert drafter_loads_before_sizing(release_tree(version)) is first


def test_the_decision():
    assert decide(False, True, 3.0)["lowered_by_gib"] == 0.0 and decide(False, True, 3.0)["note"] is None
    assert decide(True, False, 3.0)["lowered_by_gib"] == 0.0          # no speculative decoding: no drafter
    assert decide(True, True, 3.0)["lowered_by_gib"] == 3.0
    missing = decide(True, True, None)
    assert missing["lowered_by_gib"] == 0.0 and "overstate the budget" in missing["note"]
    # what bisect's summaries and reports flag (bisect/testrun.py, bisect/issue.py)
    assert overstated({"drafter_reading": missing})
    assert not overstated({"drafter_reading": decide(True, True, 3.0)})
    assert not overstated({"drafter_reading": decide(False, True, None)}) and not overstated({})


def _with_weights(name, gib):
    """A copy of the shipped scenario whose drafter has ``gib`` GiB (None: no figure given)."""
    sc = copy.deepcopy(load_scenario(name))
    sc.draft.pop("weights_gib", None)
    if gib is not None:
        sc.draft["weights_gib"] = gib
    return sc


def test_the_reading_is_lower_by_the_drafters_weights_from_v0514(release_tree):
    """dflash-smoke (radix off, 24 Mamba slots given): the Mamba share is fixed, so half a GiB of
    drafter weights comes out of the KV budget byte for byte on v0.5.14, and not at all on
    v0.5.13.post1, whose drafter loads after the sizing."""
    for version, lost in (("0.5.13.post1", 0), ("0.5.14", GIB // 2)):
        tree = release_tree(version)
        base = run_scenario(tree, _with_weights("dflash-smoke", None), verify_remedy=False)
        half = run_scenario(tree, _with_weights("dflash-smoke", 0.5), verify_remedy=False)
        assert base.outcome == half.outcome is Outcome.OK, (base.reason, half.reason)
        assert base.figures["available_bytes"] - half.figures["available_bytes"] == lost
        assert half.figures["max_mamba_cache_size"] == base.figures["max_mamba_cache_size"] == 24
        assert half.drafter_reading["lowered_by_gib"] == (0.5 if lost else 0.0)


def test_the_known_good_service_is_refused_from_v0514_with_its_drafter(release_tree):
    """With the drafter's footprint the shipped scenario gives (3.584 GiB, measured on the H200)
    the incident's known-good flags leave no KV budget on v0.5.16, as a real v0.5.16 server
    refused them there (tests/data/gpu_results/2026-12-02/r16); the release says why in its own words.
    A copy without the figure starts and says that its figures overstate the budget."""
    tree = release_tree("0.5.16")
    r = run_scenario(tree, load_scenario("dflash-smoke"), verify_remedy=False)
    assert r.outcome is Outcome.REFUSED, r.reason
    assert "draft weights are now counted" in r.error["message"]
    plain = run_scenario(tree, _with_weights("dflash-smoke", None), verify_remedy=False)
    assert plain.outcome is Outcome.OK and any("overstate the budget" in n for n in plain.notes)
    before = run_scenario(release_tree("0.5.12.post1"), load_scenario("dflash-smoke"), verify_remedy=False)
    assert before.drafter_reading["note"] is None        # sized before its drafter loaded (the incident's release)


def test_weights_must_be_a_positive_number(tmp_path):
    text = load_scenario("dflash-smoke").path.read_text()
    assert "\nweights_gib = 3.584\n" in text
    for bad in ("-1", "0", '"3 GiB"', "true"):
        f = tmp_path / "bad.toml"
        f.write_text(text.replace("\nweights_gib = 3.584\n", f"\nweights_gib = {bad}\n", 1))
        # a negative or zero figure is refused by its meaning, a string or a boolean by its type
        with pytest.raises(ScenarioError, match=r"\[draft\] weights_gib must be a (positive )?number"):
            load_file(str(f))
