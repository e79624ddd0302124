"""The patched tree (this repository's stack, built by tools/apply.py into a temporary
directory by the shared ``patched_tree`` fixture, or the tree given with --tree): the
planner's verdict is the tree's own case (docs/memory.md), in the same words.

Expectations come from the incident's log figures (docs/incidents.md: the smoke
service started at v0.5.12.post1 with 24 Mamba slots, 11,893 KV tokens, 4 running
requests; the zero-requests flags ended with 0 requests), the arithmetic of
docs/memory.md and the tree's own sizing re-run, never from the planner's output.
The planner's free-memory reading (free_gib) is the sizing's own: with no drafter
footprint given, the patched pin's reference sizing (over-budget-start.patch: upstream's
arithmetic without the padding slots) sizes the smoke service as v0.5.12.post1 logged it."""

import pytest

from sgl_overlay.harness import Case
from sgl_overlay.planner import Kind, Verdict, core, deployment, plan

from .helpers import DFLASH, LOGGED_FREE, LOGGED_SLOTS, LOGGED_TOKENS, PIN, QWEN36, SMOKE_FLAGS, ZERO_FLAGS, \
    recheck_all

GIB = 1 << 30
PER_REQ = 153_944_064  # Qwen3.6-27B mamba_cache_per_req (docs/incidents.md)
CELL = 86_016  # bf16 KV + DFlash draft KV, bytes per token (docs/incidents.md)


def test_smoke_flags_start_over_budget_on_the_patched_tree(patched_tree):
    """The known-good smoke service: v0.5.12.post1 started it with the logged 24 / 11,893 / 4; the
    pristine pin refuses it (its budget now holds the pools' padding slots, over-budget-start.patch),
    and the patched pin starts it with the reference sizing (upstream's arithmetic without the padding
    slots), which gives those figures, its pools over the 13.57 GiB budget: "starts, over budget by 2.41 GiB
    taken from the headroom (remedy ...)", exit 0, with the pin's requests and slots and
    1,371 KV tokens more: the 4 intermediate slots' deduplicated conv windows (4 x 30 columns
    of 983,040 B, in 86,016 B tokens) that the pin's arithmetic reserved dense."""
    pin = core.size(deployment(model=QWEN36, draft=DFLASH, argv=SMOKE_FLAGS, release=PIN, free_gib=LOGGED_FREE))
    assert pin.verdict == core.WONT, pin.verdict    # the pristine pin refuses it: the padding slots (#32184)
    dep = deployment(model=QWEN36, draft=DFLASH, argv=SMOKE_FLAGS, tree=str(patched_tree), free_gib=LOGGED_FREE)
    s = core.size(dep)
    # pools as allocated: 25 state slots, (4 + 1) intermediate slots (16 SSM states and the conv
    # windows deduplicated: 30 of their 48 columns of 983,040 B fewer), the KV tokens + 1 page;
    # budget 43.19 - 94.24 x (1 - 0.6856901) GiB
    tokens = LOGGED_TOKENS + 4 * 30 * 983040 // CELL
    over = (25 * PER_REQ + 5 * (16 * PER_REQ - 30 * 983040) + (tokens + 1) * CELL) / GIB - (43.19 - 94.24 * (1 - 0.6856901))
    assert round(over, 2) == 2.41
    assert s.verdict.kind is Kind.OVER_BUDGET and s.verdict.starts, s.verdict
    assert round(s.verdict.over_budget_bytes / GIB, 2) == 2.41
    assert [flag for flag, _ in s.verdict.remedies] == ["--mem-fraction-static"]
    assert s.verdict.text.startswith("starts, over budget by 2.41 GiB taken from the headroom (remedy: "
                                     "--mem-fraction-static = "), s.verdict
    assert s.case is Case.OVER_BUDGET
    assert (s.ledger["mamba_slots"], s.ledger["kv_tokens"], s.ledger["running_requests"]) == (
        LOGGED_SLOTS, tokens, 4)
    assert s.verdict.exit_code == 0


def test_zero_request_flags_will_not_start_on_the_patched_tree(patched_tree):
    """The zero-requests flags (0 running requests on v0.5.12.post1, the incident): "will not start", exit 1,
    with the tree's stated remedies re-run and shown as working."""
    args = dict(model=QWEN36, draft=DFLASH, argv=ZERO_FLAGS, tree=str(patched_tree), free_gib=LOGGED_FREE)
    dep = deployment(**args)
    report = plan(dep, with_sensitivity=False, knobs=("max-running-requests",))
    assert report["verdict"] == core.WONT
    assert "not even one request fits" in " ".join(core.size(dep).why)
    assert report["case"] is Case.CANNOT_RUN
    assert report["verdict"].exit_code == 1
    # the memory topic's remedies for this configuration (docs/memory.md): on the pin
    # (v0.5.17, the pools' padding slots reserved) not even one request fits at 0.647166,
    # so no --max-running-requests is stated; the --mem-fraction-static is the smallest
    # (3 decimals) that starts the 4 requests: one thousandth less does not
    stated = [t["argv"] for t in report["tree_remedies"]]
    assert [argv[0] for argv in stated] == ["--mem-fraction-static"] and all(len(a) == 2 for a in stated), stated
    assert all(t["works"] for t in report["tree_remedies"])
    recheck_all(args, report)
    mfs = float(stated[0][1])
    below = core.size(deployment(**dict(args, argv=list(ZERO_FLAGS) + ["--mem-fraction-static", f"{mfs - 0.001:.3f}"])))
    assert below.verdict == core.WONT, (mfs, below.verdict)


def test_exit_codes_and_words_of_the_three_answers():
    over = Verdict(Kind.OVER_BUDGET, round(2.44 * GIB), (("--mem-fraction-static", 0.793),))
    assert [v.exit_code for v in (core.STARTS, over, core.WONT, core.UNKNOWN)] == [0, 0, 1, 125]
    assert [v.starts for v in (core.STARTS, over, core.WONT, core.UNKNOWN)] == [True, True, False, False]
    assert over.text == ("starts, over budget by 2.44 GiB taken from the headroom (remedy: "
                         "--mem-fraction-static = 0.793)")
    assert Verdict(Kind.OVER_BUDGET, GIB).text == ("starts, over budget by 1.00 GiB taken from the headroom "
                                                   "(no remedy stated)")
    assert [str(v) for v in (core.STARTS, core.WONT, core.UNKNOWN, core.REJECTED)] == [
        "starts", "will not start", "cannot tell", "rejected"]
    with pytest.raises(ValueError, match="its error's"):
        core.REJECTED.exit_code  # noqa: B018 - a rejected release's exit is its UsageError's
