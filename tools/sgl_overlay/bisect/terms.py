"""The terms of a bisection, git's: the range goes from an *old* endpoint to
a *new* one.  Plain bisect: old = the test passes (good), new = it fails
(bad).  ``fixed``: old = it fails, new = it passes.  A test run's raw result
is ``pass``, ``fail``, ``skip`` (untestable) or ``abort``, by git bisect
run's exit protocol; ``term_of`` maps it to a term."""

OLD, NEW, SKIP, ABORT = "old", "new", "skip", "abort"


def agree(outcomes):
    """One term for a point's runs: the shared one, or "flaky" when they disagree."""
    kinds = set(outcomes)
    return outcomes[0] if len(kinds) == 1 else "flaky"


def classify(code):
    """git bisect run's protocol: 0 pass, 125 skip, 1-127 fail, else abort."""
    if code == 0:
        return "pass"
    if code == 125:
        return "skip"
    if 1 <= code <= 127:
        return "fail"
    return "abort"


def term_of(raw, fixed):
    if raw in ("skip", "abort"):
        return raw
    return (NEW if raw == "pass" else OLD) if fixed else (OLD if raw == "pass" else NEW)
