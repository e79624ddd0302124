"""The strategy (pure): from the results so far to the next points to test,
or the verdict."""
import dataclasses
import math

from .terms import NEW, OLD, SKIP, agree


@dataclasses.dataclass
class Decision:
    test: list = dataclasses.field(default_factory=list)   # point ids to test next
    phase: str = ""                                       # "endpoints" | "bisect"
    verdict: dict = None


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
        if runs and agree(runs) == "flaky":
            return Decision(verdict={"verdict": "flaky", "point": pid, "runs": list(runs)})
    term = {pid: agree(r) for pid, r in known.items() if r}
    checks = [(p, OLD) for p in rng.extra_old] + [(rng.points[0], OLD), (rng.points[-1], NEW)]
    pending = [p.id for p, _ in checks if p.id not in term]
    if pending:
        return Decision(test=pending[:max(1, jobs)], phase="endpoints")
    for want_skip in (False, True):          # a wrong result outranks an untestable endpoint
        for p, want in checks:
            got = term[p.id]
            if got != want and (got == SKIP) == want_skip:
                return Decision(verdict=_endpoint_verdict(rng, p, want, got, term))
    pts = rng.points
    hi = next(i for i, p in enumerate(pts) if term.get(p.id) == NEW)
    lo = max(i for i in range(hi) if term.get(pts[i].id) == OLD)
    later_old = [p.id for p in pts[hi + 1:] if term.get(p.id) == OLD]
    between = list(range(lo + 1, hi))
    todo = [i for i in between if pts[i].id not in term]
    if todo:
        return Decision(test=[pts[todo[j]].id for j in cuts(len(todo), jobs)], phase="bisect")
    skipped = [pts[i].id for i in between if term.get(pts[i].id) == SKIP]
    if skipped:
        v = {"verdict": "inconclusive", "last_old": pts[lo].id, "first_new": pts[hi].id, "skipped": skipped}
    else:
        v = {"verdict": "first-new", "last_old": pts[lo].id, "first_new": pts[hi].id}
    if later_old:
        v["non_monotonic"] = later_old
    return Decision(verdict=v)


def _endpoint_verdict(rng, p, want, got, term):
    if got == SKIP:
        return {"verdict": "inconclusive", "endpoint": p.id, "expected": want}
    if want == OLD:
        v = {"verdict": "not-in-range", "endpoint": p.id, "new_end": rng.points[-1].id,
             "new_end_term": term[rng.points[-1].id]}
        if p.id == rng.points[0].id and rng.extra_old:
            v["merge_base"] = True
        return v
    return {"verdict": "cannot-reproduce", "endpoint": p.id}


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
