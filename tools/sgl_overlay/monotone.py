"""The boundary of a monotone predicate over a range of integers, found by
binary search: the smallest change of a flag that makes a plan start
(``planner.suggestions``), the smallest value of a stated remedy that
starts a scenario (``bisect.evidence``).  Pure: the probing is the caller's.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Boundary:
    passing: tuple | None   # (index, result): the passing index nearest the failing end; None: none passes
    failing: tuple | None   # (index, result): the failing probe nearest ``far`` (the passing index's
    #                         neighbour once the search is done); None: no probe failed
    probes: int             # how many times ``probe`` was called


def boundary(probe, fails, far, hint=None):
    """Search the integers strictly past ``fails`` up to ``far`` (inclusive,
    either direction) for the passing index nearest ``fails``, assuming the
    predicate is monotone: it fails at ``fails`` (not probed) and, once it
    passes, passes at every index beyond, toward ``far``.

    ``probe(i)`` returns ``(result, passed)``.  ``far`` is probed first, so a
    range where nothing passes costs one probe.  ``hint``: an index to probe
    first, then its neighbour toward ``fails`` (a guess; only probes decide).
    """
    step = 1 if far > fails else -1
    probes = 0
    passing = failing = None

    def run(i):
        nonlocal probes, passing, failing
        probes += 1
        result, passed = probe(i)
        if passed:          # each probe lies between the last failing and the last passing one,
            passing = (i, result)
        else:               # so the latest of each is the nearest to the boundary
            failing = (i, result)
        return passed

    a, b = fails, far                   # a fails (known or probed); b passes once probed
    if fails == far:
        return Boundary(None, None, 0)
    if hint is not None and (hint - fails) * step > 0 and (far - hint) * step > 0:
        if run(hint):
            b = hint
            near = hint - step
            if near != fails:
                if run(near):
                    b = near
                else:
                    return Boundary(passing, failing, probes)
        else:
            a = hint
    if passing is None and not run(b):
        return Boundary(None, failing, probes)
    while abs(b - a) > 1:
        mid = (a + b) // 2
        if run(mid):
            b = mid
        else:
            a = mid
    return Boundary(passing, failing, probes)
