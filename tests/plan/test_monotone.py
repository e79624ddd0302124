"""The one binary search (sgl_overlay.monotone) the planner's suggestions and
bisect's working values share, against a plain scan of every threshold, in
both directions, with and without a hint."""
import math

import pytest

from sgl_overlay.monotone import boundary


def searched(fails, far, threshold, hint=None):
    """A predicate that passes from ``threshold`` on (toward ``far``); every probe recorded."""
    step = 1 if far > fails else -1
    calls = []

    def probe(i):
        calls.append(i)
        return f"run {i}", (i - threshold) * step >= 0
    return boundary(probe, fails, far, hint), calls


def scan(fails, far, threshold):
    """The answer by looking at every index, nearest ``fails`` first."""
    step = 1 if far > fails else -1
    return next((i for i in range(fails + step, far + step, step) if (i - threshold) * step >= 0), None)


@pytest.mark.parametrize("fails,far", [(0, 1), (0, 2), (3, 40), (40, 3), (1, 0), (10, 0)])
@pytest.mark.parametrize("with_hint", [False, True])
def test_the_nearest_passing_index_as_a_scan_finds_it(fails, far, with_hint):
    step = 1 if far > fails else -1
    n = abs(far - fails)
    for threshold in range(fails - 2 * step, far + 3 * step, step):
        for hint in (range(fails - step, far + 2 * step, step) if with_hint else [None]):
            b, calls = searched(fails, far, threshold, hint)
            want = scan(fails, far, threshold)
            assert (b.passing[0] if b.passing else None) == want, (threshold, hint)
            if b.passing:
                assert b.passing[1] == f"run {want}"
            assert b.probes == len(calls)
            # only the range past ``fails`` is probed, never twice, within the binary search's bound
            assert all(0 < (i - fails) * step <= n for i in calls) and len(set(calls)) == len(calls)
            assert len(calls) <= math.ceil(math.log2(n)) + 1 + (2 if hint is not None else 0)
            # the failing probe nearest ``far``: next to the answer when it was probed
            fail_probes = [i for i in calls if (i - threshold) * step < 0]
            if fail_probes:
                nearest = max(fail_probes, key=lambda i: i * step)
                assert b.failing == (nearest, f"run {nearest}")
            else:
                assert b.failing is None


def test_a_range_where_nothing_passes_costs_one_probe_and_names_it():
    b, calls = searched(0, 99, threshold=500)
    assert (b.passing, b.failing, b.probes, calls) == (None, (99, "run 99"), 1, [99])


def test_a_right_hint_costs_two_probes():
    # the hint passes, its neighbour toward ``fails`` does not: the answer, without a search
    b, calls = searched(0, 1000, threshold=377, hint=377)
    assert calls == [377, 376] and b.passing == (377, "run 377") and b.failing == (376, "run 376")
    b, calls = searched(1000, 0, threshold=377, hint=377)
    assert calls == [377, 378] and b.passing == (377, "run 377") and b.failing == (378, "run 378")


def test_an_empty_range_probes_nothing():
    b, calls = searched(5, 5, threshold=0)
    assert (b.passing, b.failing, b.probes, calls) == (None, None, 0, [])
