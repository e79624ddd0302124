"""The remedy search (sgl_overlay.memory_remedy, carried by the memory topic as
sglang/srt/model_executor/memory_remedy.py): its order and its answers, against a brute force over the
same flags, and the one file that both the server and the planner run."""

import itertools
import math
from pathlib import Path

import pytest
from unidiff import PatchSet

from sgl_overlay import memory_remedy as M

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "patches" / "memory-where-no-single-flag-fits.patch"


def _fits(limit):
    """A monotone start-up: (requests, fraction, context) fits when the state of the requests and the
    context's KV cache fit the budget the fraction leaves."""
    def fits(f):
        n, m, ctx = f.get("max_running_requests", 16), f.get("mem_fraction_static", 0.7), f.get("context_length", 32768)
        return n * 1.0 + ctx / 8192 <= (m - 0.5) * limit
    return fits


def _knobs():
    return [M.requests_knob(16), M.fraction_knob(0.7), M.context_knob(32768, step=8192)]


def _probe(fits):
    return lambda batch: [(fits(f), dict(f)) for f in batch]


def brute(knobs, fits, size):
    """Every set of ``size`` flags and every value combination that fits: the sets with a fit, and for
    each set the value tuples that fit and that no other fitting tuple is nearer on every flag."""
    out = {}
    for combo in itertools.combinations(knobs, size):
        fitting = [idx for idx in itertools.product(*(range(len(k.values)) for k in combo))
                   if fits({k.field: k.values[i] for k, i in zip(combo, idx)})]
        minimal = [a for a in fitting if not any(b != a and all(x <= y for x, y in zip(b, a)) for b in fitting)]
        if minimal:
            out[tuple(k.field for k in combo)] = {tuple(k.values[i] for k, i in zip(combo, a)) for a in minimal}
    return out


def test_single_flags_first_each_the_nearest_value_that_fits():
    fits = _fits(40)     # 16 requests + 4 need 20 = (m - 0.5) x 40: m = 1.0 > 0.95; fewer requests or context
    found = M.search(_knobs(), _probe(fits), want=3)
    want = brute(_knobs(), fits, 1)
    assert {r.changes[0].knob.field for r in found.remedies} == {f for (f,) in want}
    for r in found.remedies:
        (c,) = r.changes
        assert {(c.value,)} == want[(c.knob.field,)], r.line
        assert r.answer == r.fields  # the answer is the probe's own for exactly these changes
    # the cheapest give-up first: the context before the requests (the fraction cannot fit alone)
    assert [r.changes[0].knob.field for r in found.remedies] == sorted(
        (f for (f,) in want), key=lambda f: next(k for k in _knobs() if k.field == f).gives_up.cost)


def test_pairs_only_where_no_single_flag_fits_and_each_a_minimal_point():
    fits = _fits(20)     # only several flags together fit
    assert not brute(_knobs(), fits, 1)
    found = M.search(_knobs(), _probe(fits), want=2)
    pairs = brute(_knobs(), fits, 2)
    assert found.remedies and all(len(r.changes) == 2 for r in found.remedies)
    for r in found.remedies:
        key = tuple(k.field for k in _knobs() if k.field in r.fields)
        got = tuple(r.fields[f] for f in key)
        assert got in pairs[key], (r.line, pairs[key])     # no pair nearer on both flags fits
        assert r.line == "remedy: " + " ".join(f"{c.knob.flag} {M._text(c.value)}" for c in r.changes)
    # the requests, the costliest give-up, are given back first: written first
    assert all(r.changes[0].knob.gives_up.cost >= r.changes[-1].knob.gives_up.cost for r in found.remedies)


def test_nothing_starts_only_after_every_set_was_tried():
    found = M.search(_knobs(), _probe(lambda f: False), max_flags=3)
    assert not found.found
    assert len(found.tried) == sum(math.comb(3, k) for k in (1, 2, 3))
    assert found.probes == len(found.tried)    # one probe a set: each at its far end
    assert found.nothing_starts() == ("no change of up to 3 of these flags starts it: --max-running-requests, "
                                      "--mem-fraction-static, --context-length")


def test_the_knobs_values():
    assert M.fraction_knob(0.7777).values[:2] == (0.778, 0.779) and M.fraction_knob(0.7777).values[-1] == 0.95
    assert M.fraction_knob(0.96).values == ()
    assert M.requests_knob(4).values == (3, 2, 1)
    assert M.context_knob(4096).values == (3072, 2048, 1024)
    assert M.kv_dtype_knob("fp8_e5m2").values == () and M.kv_dtype_knob("auto").values == ("fp8_e4m3",)
    assert M.draft_tokens_knob("--speculative-dflash-block-size", "speculative_dflash_block_size", 16).values[-1] == 2
    assert M.radix_strategy_knob("--x", "x", "extra_buffer").values == ("no_buffer",)


def test_the_server_runs_this_same_file():
    """The memory topic's patch adds sglang/srt/model_executor/memory_remedy.py: byte for byte this
    module (edit the library's, then rebuild the tree and `tools/stack.py refresh` it into the patch)."""
    (added,) = [f for f in PatchSet(PATCH.read_text()) if f.path.endswith("model_executor/memory_remedy.py")]
    assert added.is_added_file
    text = "".join(line.value for hunk in added for line in hunk if line.is_added)
    assert text == (ROOT / "tools" / "sgl_overlay" / "memory_remedy.py").read_text()


@pytest.mark.parametrize("value,text", [(0.93, "0.93"), (0.925, "0.925"), (4, "4"), ("no_buffer", "no_buffer")])
def test_values_as_a_command_line_takes_them(value, text):
    assert M._text(value) == text
