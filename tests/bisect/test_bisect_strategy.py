"""The pure strategy, exhaustively: every range length, every place the
change can be, skips, flaky runs, endpoints that do not hold."""
import math

import pytest

from sgl_overlay.bisect import NEW, OLD, SKIP, Point, ReleaseRange, cuts, decide
from sgl_overlay.bisect.verdict import CannotReproduce, FirstNew, Flaky, NotInRange, SkippedBetween, UntestableEndpoint


def rng(n, extra=0):
    return ReleaseRange([Point(str(i), f"p{i}") for i in range(n)],
                        extra_old=[Point(f"x{i}", "extra") for i in range(extra)])


def ids(points):
    return [p.id for p in points]


def simulate(r, truth, jobs=1, runs=1):
    """Drive decide() with ``truth``: point id -> term; returns (verdict, executions, rounds)."""
    known, execs, rounds = {}, 0, 0
    while True:
        d = decide(r, known, jobs)
        if d.verdict:
            return d.verdict, execs, rounds
        assert 1 <= len(d.test) <= jobs and not set(d.test) & set(known)
        rounds += 1
        for pid in d.test:
            t = truth(pid)
            known[pid] = [t] * runs if isinstance(t, str) else list(t)
            execs += runs


@pytest.mark.parametrize("n", list(range(2, 70)) + [100, 257, 1000])
def test_finds_every_first_bad_within_the_bound(n):
    for first in range(1, n):
        r = rng(n)
        v, execs, _ = simulate(r, lambda pid: OLD if int(pid) < first else NEW)
        assert v == FirstNew(r.point(str(first - 1)), r.point(str(first)))
        assert execs <= math.ceil(math.log2(n)) + 2, (n, first, execs)


@pytest.mark.parametrize("jobs", [2, 3, 4])
@pytest.mark.parametrize("n", [3, 5, 9, 12, 30, 100])
def test_jobs_k_rounds_are_within_log_k_plus_1(n, jobs):
    worst = 0
    for first in range(1, n):
        v, execs, rounds = simulate(rng(n), lambda pid: OLD if int(pid) < first else NEW, jobs=jobs)
        assert v.first_new.id == str(first)
        worst = max(worst, rounds)
    # one round for both endpoints, then at most ceil(log_{K+1} (N-1)) rounds
    assert worst <= 1 + math.ceil(math.log(n - 1, jobs + 1) - 1e-9), (n, jobs, worst)


def test_cuts_split_evenly():
    assert cuts(7, 1) == [3]
    assert cuts(10, 1) == [4] and cuts(2, 1) == [1] and cuts(1, 1) == [0]
    assert cuts(7, 2) == [2, 4]
    assert cuts(2, 5) == [0, 1]
    for m in range(1, 40):
        for k in range(1, 6):
            c = cuts(m, k)
            assert len(c) == min(m, k) and len(set(c)) == len(c) and all(0 <= j < m for j in c)


def test_old_endpoint_first_and_its_failure_is_not_in_range():
    r = rng(6)
    assert decide(r, {}).test == ("0",)
    assert decide(r, {"0": [NEW]}).test == ("5",)           # both ends are verified
    v = decide(r, {"0": [NEW], "5": [NEW]}).verdict
    assert v == NotInRange(r.point("0"), r.point("5"), NEW)


def test_new_endpoint_passing_is_cannot_reproduce():
    assert decide(rng(6), {"0": [OLD], "5": [OLD]}).verdict == CannotReproduce(Point("5", "p5"))


def test_wrong_endpoint_outranks_untestable_one():
    assert isinstance(decide(rng(6), {"0": [SKIP], "5": [OLD]}).verdict, CannotReproduce)
    assert decide(rng(6), {"0": [SKIP], "5": [NEW]}).verdict == UntestableEndpoint(Point("0", "p0"), OLD)


def test_merge_base_and_good_ref_are_both_verified():
    r = rng(5, extra=1)
    assert decide(r, {}, jobs=3).test == ("x0", "0", "4")
    v = decide(r, {"x0": [OLD], "0": [NEW], "4": [NEW]}).verdict
    assert v == NotInRange(r.point("0"), r.point("4"), NEW, merge_base=True)
    # the good ref off the base failing is not the merge base's answer
    assert decide(r, {"x0": [NEW], "0": [OLD], "4": [NEW]}).verdict == NotInRange(r.point("x0"), r.point("4"), NEW)


def test_only_skipped_candidates_left_is_inconclusive_with_them_listed():
    truth = {0: OLD, 1: OLD, 2: SKIP, 3: SKIP, 4: NEW, 5: NEW, 6: NEW}
    r = rng(7)
    v, _, _ = simulate(r, lambda pid: truth[int(pid)])
    assert v == SkippedBetween(r.point("1"), r.point("4"), (r.point("2"), r.point("3")))


def test_a_skip_is_stepped_around():
    truth = {0: OLD, 1: OLD, 2: OLD, 3: SKIP, 4: NEW, 5: NEW, 6: NEW, 7: NEW, 8: NEW}
    r = rng(9)
    v, _, _ = simulate(r, lambda pid: truth[int(pid)])
    assert isinstance(v, SkippedBetween) and ids(v.skipped) == ["3"]
    truth[3] = OLD
    truth[2] = SKIP
    v, _, _ = simulate(r, lambda pid: truth[int(pid)])
    assert v == FirstNew(r.point("3"), r.point("4"))


def test_runs_that_disagree_are_flaky():
    v = decide(rng(6), {"0": [OLD, NEW]}).verdict
    assert v == Flaky(Point("0", "p0"), (OLD, NEW))


def test_later_old_points_are_reported_as_non_monotonic():
    known = {"0": [OLD], "5": [NEW], "2": [NEW], "1": [OLD], "4": [OLD]}
    v = decide(rng(6), known, jobs=2).verdict
    assert v.first_new.id == "2" and ids(v.non_monotonic) == ["4"]
