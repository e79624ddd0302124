"""Exit codes and the one error type the tools raise.

Every error names the thing, the place, the reason, and the next step
(``hint``).  The CLI prints ``error: <message>`` and ``hint: <hint>`` and
exits with ``code``.
"""

OK = 0          # built, or already up to date; check passed
FAILED = 1      # a patch or the overlay did not apply (or is stale)
USAGE = 2       # bad input: arguments, lock, series, patch headers, paths
INTEGRITY = 3   # a download or a tree does not match the lock
UNTESTABLE = 125  # regress/bisect: the harness could not drive the tree (git bisect run's skip)


class OverlayError(Exception):
    code = FAILED

    def __init__(self, message, hint=None, code=None, details=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code
        self.details = details or {}

    def as_dict(self):
        d = {"error": self.message, "exit_code": self.code, "hint": self.hint or None}
        if self.details:
            d.update(self.details)
        return d

    def __str__(self):
        return self.message + (f"\nhint: {self.hint}" if self.hint else "")


class UsageError(OverlayError):
    code = USAGE


class IntegrityError(OverlayError):
    code = INTEGRITY


class ApplyError(OverlayError):
    code = FAILED
