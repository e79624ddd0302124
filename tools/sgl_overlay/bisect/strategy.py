"""The strategy (pure): from the results so far to the next points to test,
or the verdict."""
import dataclasses
import enum
import math

from .terms import NEW, OLD, SKIP, agree
from .verdict import CannotReproduce, FirstNew, Flaky, NotInRange, SkippedBetween, UntestableEndpoint, Verdict


class Phase(enum.StrEnum):
    ENDPOINTS = "endpoints"             # verifying the ends (and a good ref off the merge base)
    BISECT = "bisect"                   # searching between the last old and the first new point


@dataclasses.dataclass(frozen=True)
class Decision:
    test: tuple = ()                    # point ids to test next
    phase: Phase | None = None
    verdict: Verdict | None = None      # or the answer, when nothing is left to test


def cuts(m, k):
    """Positions in a list of ``m`` untested candidates to test at once so
    that the m+1 places the answer can be in fall into k+1 near-equal parts."""
    k = min(k, m)
    if k == 1:
        # binary: the m+1 places split ceil(m/2) (answer at or below the
        # pick) against floor(m/2)+1 (above it), never picking the first
        # candidate when there are two or more -- the same point git bisect
        # picks on a linear range, so neither needs more runs than the other.
        return [max(math.ceil(m / 2) - 1, 1 if m >= 2 else 0)]
    picks = []
    for i in range(1, k + 1):
        j = min(m - 1, max(0, int(i * (m + 1) / (k + 1) + 0.5) - 1))
        while j in picks and j < m - 1:
            j += 1
        if j not in picks:
            picks.append(j)
    rest = [j for j in range(m) if j not in picks]
    return sorted(picks + rest[:k - len(picks)])


def decide(rng, known, jobs=1):
    """From the results so far (``known``: point id -> list of terms, one per
    run) to either the next points to test or the verdict.  Endpoints first
    (the old end before the new one unless ``jobs`` > 1), then a
    (jobs+1)-ary search between the last old and the first new point."""
    for pid, runs in known.items():
        if runs and agree(runs) is None:
            return Decision(verdict=Flaky(rng.point(pid), tuple(runs)))
    term = {pid: agree(r) for pid, r in known.items() if r}
    checks = [(p, OLD) for p in rng.extra_old] + [(rng.points[0], OLD), (rng.points[-1], NEW)]
    pending = [p.id for p, _ in checks if p.id not in term]
    if pending:
        return Decision(test=tuple(pending[:max(1, jobs)]), phase=Phase.ENDPOINTS)
    for want_skip in (False, True):          # a wrong result outranks an untestable endpoint
        for p, want in checks:
            got = term[p.id]
            if got != want and (got == SKIP) == want_skip:
                return Decision(verdict=_endpoint_verdict(rng, p, want, got, term))
    pts = rng.points
    hi = next(i for i, p in enumerate(pts) if term.get(p.id) == NEW)
    lo = max(i for i in range(hi) if term.get(pts[i].id) == OLD)
    later_old = tuple(p for p in pts[hi + 1:] if term.get(p.id) == OLD)
    between = list(range(lo + 1, hi))
    todo = [i for i in between if pts[i].id not in term]
    if todo:
        return Decision(test=tuple(pts[todo[j]].id for j in cuts(len(todo), jobs)), phase=Phase.BISECT)
    skipped = tuple(pts[i] for i in between if term.get(pts[i].id) == SKIP)
    if skipped:
        return Decision(verdict=SkippedBetween(pts[lo], pts[hi], skipped, later_old))
    return Decision(verdict=FirstNew(pts[lo], pts[hi], later_old))


def _endpoint_verdict(rng, p, want, got, term):
    if got == SKIP:
        return UntestableEndpoint(p, want)
    if want == OLD:
        new_end = rng.points[-1]
        return NotInRange(p, new_end, term[new_end.id], merge_base=p.id == rng.points[0].id and bool(rng.extra_old))
    return CannotReproduce(p)


def remaining_steps(rng, known, jobs=1):
    """About how many bisection steps are left (for the progress line):
    each round tests up to ``jobs`` points and keeps one part of jobs+1."""
    term = {pid: agree(r) for pid, r in known.items() if r}
    pts = rng.points
    his = [i for i, p in enumerate(pts) if term.get(p.id) == NEW]
    hi = his[0] if his else len(pts) - 1
    los = [i for i in range(hi) if term.get(pts[i].id) == OLD]
    lo = los[-1] if los else 0
    m = sum(1 for i in range(lo + 1, hi) if pts[i].id not in term)
    steps = 0
    while m > 0:
        k = min(jobs, m)
        steps += k
        m = math.ceil((m - k) / (k + 1))
    return steps
