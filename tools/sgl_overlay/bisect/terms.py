"""The terms of a bisection, git's: the range goes from an *old* endpoint to
a *new* one.  Plain bisect: old = the test passes (good), new = it fails
(bad).  ``fixed``: old = it fails, new = it passes.  A test run's raw result
(``Raw``) is pass, fail, skip (untestable) or abort, by git bisect run's
exit protocol; ``Term.of`` maps it to a term."""
import enum


class Raw(enum.StrEnum):
    """One test run's result, by git bisect run's exit protocol."""
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ABORT = "abort"

    @classmethod
    def of_exit(cls, code: int) -> "Raw":
        """0 pass, 125 skip, 1-127 fail, anything else abort."""
        if code == 0:
            return cls.PASS
        if code == 125:
            return cls.SKIP
        if 1 <= code <= 127:
            return cls.FAIL
        return cls.ABORT


class Term(enum.StrEnum):
    """Where a run puts its point: with the old end, the new end, or neither."""
    OLD = "old"
    NEW = "new"
    SKIP = "skip"
    ABORT = "abort"

    @classmethod
    def of(cls, raw: Raw, fixed: bool) -> "Term":
        if raw in (Raw.SKIP, Raw.ABORT):
            return cls(raw.value)
        passed_is_old = not fixed
        return cls.OLD if (raw is Raw.PASS) == passed_is_old else cls.NEW


OLD, NEW, SKIP, ABORT = Term.OLD, Term.NEW, Term.SKIP, Term.ABORT


def agree(terms) -> Term | None:
    """The one term a point's runs share, or None when they disagree (flaky)."""
    return Term(terms[0]) if len(set(terms)) == 1 else None
