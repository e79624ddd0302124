"""The remedy search's promise, as a property over a grid of cards x models x flags: every change
set the planner prints as starting is re-run, independently of the search (its flags appended to the
command and parsed again by the release's own ServerArgs), and starts with everything else asked;
a search that finds nothing has tried every set of up to three of the flags it names.

The grid's points are drawn with a fixed seed from the product of the planner's GPU table, two models
(the Qwen3.6-27B hybrid with its DFlash drafter, Llama-3.1-8B) and the flags' values below, kept to the
points whose plan does not start as asked (the only ones with something to suggest); none is typed in.
Then the issue's own regressions: the RTX PRO 6000 block-size suggestion that printed the block size
as the memory fraction, and the H100 readings where only two flags together start."""

import itertools
import math
import random

import pytest

from sgl_overlay.planner import core, deployment, gpus, plan
from sgl_overlay.planner.suggestions import MAX_FLAGS

from .helpers import DFLASH, LLAMA8B, QWEN36, recheck_all

MODELS = {"qwen3.6-27b+dflash": dict(model=QWEN36, draft=DFLASH), "llama-3.1-8b": dict(model=LLAMA8B)}
VALUES = {
    "--max-running-requests": (None, "4", "16", "48"),
    "--context-length": (None, "8192", "32768"),
    "--mem-fraction-static": (None, "0.6", "0.75", "0.85"),
    "--kv-cache-dtype": (None, "fp8_e4m3"),
}
SEED, POINTS = 40, 3


def _argv(model, values):
    argv = ["--speculative-algorithm", "DFLASH", "--mamba-scheduler-strategy", "no_buffer",
            "--disable-radix-cache"] if model.startswith("qwen") else []
    for flag, v in values.items():
        if v is not None:
            argv += [flag, v]
    return argv


def _grid():
    """Every (card, model, flags) of the product, shuffled with the seed."""
    points = [(card.name, model, dict(zip(VALUES, combo)))
              for card in gpus.GPUS for model in MODELS for combo in itertools.product(*VALUES.values())]
    random.Random(SEED).shuffle(points)
    return points


def _kwargs(card, model, values):
    return dict(MODELS[model], gpu=card, argv=_argv(model, values))


@pytest.fixture(scope="module")
def short_of_asked(patched_tree):
    """The first POINTS points of the shuffled grid whose plan does not start as asked (one sizing
    run each decides), with their deployments' arguments."""
    found = []
    for card, model, values in _grid():
        kw = dict(_kwargs(card, model, values), tree=str(patched_tree))
        if core.size(deployment(**kw)).rank < core.FULL:
            found.append(kw)
            if len(found) == POINTS:
                return found
    pytest.fail("the grid has no point that fails to start as asked")


@pytest.mark.parametrize("i", range(POINTS))
def test_every_printed_start_re_runs_and_starts(short_of_asked, i):
    kw = short_of_asked[i]
    report = plan(deployment(**kw), with_sensitivity=False)
    search = report["search"]
    assert search is not None, kw
    for s in report["suggestions"]:
        assert 1 <= len(s["changes"]) <= MAX_FLAGS and s["verdict"].kind is core.Kind.STARTS and not s["shortfall"]
        # nothing is printed with a nonsensical figure (issue 40: a block size taken for the fraction)
        assert s["ledger"]["mem_fraction_static"] <= 0.95 and s["ledger"].get("headroom_gib", 0) >= 0, s["argv"]
    assert recheck_all(kw, report) == len(report["suggestions"]) + len(report.get("tree_remedies") or [])
    if not report["suggestions"]:
        # "nothing starts" only when every set up to MAX_FLAGS of the searched flags was tried
        n = len(search["searched"])
        assert len(search["tried"]) == sum(math.comb(n, k) for k in range(1, min(MAX_FLAGS, n) + 1)), search
        assert search["nothing_starts"].startswith(f"no change of up to {MAX_FLAGS} of these flags starts it")


RTX_FLAGS = ("--mem-fraction-static 0.65 --kv-cache-dtype fp8_e4m3 --max-running-requests 4 --mamba-scheduler-strategy "
             "extra_buffer --context-length 32768 --speculative-algorithm DFLASH").split()


def test_the_block_size_is_never_taken_for_the_fraction(patched_tree):
    """Issue 40: on the RTX PRO 6000 these flags printed "--speculative-dflash-block-size 15  starts
    30,020,182 KV tokens ... headroom GiB -1,326.2": the search's block-size probes ran with the
    fraction set to the block size (a closure read the loop's variable after it moved on).  Every
    flag's search alone, each printed change set re-run."""
    kw = dict(model=QWEN36, draft=DFLASH, gpu="RTX PRO 6000 Blackwell", argv=RTX_FLAGS, tree=str(patched_tree))
    report = plan(deployment(**kw), with_sensitivity=False, knobs=("speculative-budget", "mem-fraction-static"))
    assert report["suggestions"], report["search"]
    for s in report["suggestions"]:
        assert s["ledger"]["mem_fraction_static"] <= 0.95 and s["ledger"]["headroom_gib"] >= 0, s["argv"]
        for c in s["changes"]:
            assert s["overrides"] == {c["field"]: c["value"] for c in s["changes"]}
    recheck_all(kw, report)


H100_FREE = [82_193_940_480 / (1 << 30), 23_217_831_936 / (1 << 30)]  # issue 40's H100 start-up
H200_16 = ("--context-length 32768 --speculative-algorithm DFLASH --speculative-dflash-block-size 16 "
           "--disable-radix-cache --mamba-scheduler-strategy no_buffer --max-running-requests 16").split()


def test_a_remedy_on_the_h100_readings(patched_tree):
    """Issue 40's H100 readings with h200-16's flags and SGLang's own fraction, where the planner said
    "No single flag value fits this on this GPU ... use more GPUs": it prints change sets of at most
    three flags that start, each re-run.  (The planner charges no drafter checkpoint here, so one
    request alone may fit; the server's own refusal with the drafter's footprint is
    tests/memory/test_patches.py's check_combined_remedies.)"""
    kw = dict(model=QWEN36, draft=DFLASH, gpu="H100 80GB", argv=H200_16, free_gib=H100_FREE, tree=str(patched_tree))
    report = plan(deployment(**kw), with_sensitivity=False)
    assert report["verdict"].kind is core.Kind.WONT
    assert report["mem_fraction_static"]["source"] == "release"
    assert report["suggestions"] and all(1 <= len(s["changes"]) <= 3 for s in report["suggestions"]), report["search"]
    assert "use more GPUs" not in "\n".join(report["why"])
    recheck_all(kw, report)
