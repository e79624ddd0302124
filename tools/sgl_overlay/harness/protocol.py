"""What the parent and the child interpreter exchange: one request (JSON on the child's stdin) and one
result (one JSON line on its stdout), each read into these types once at the end that receives it.

    parent                                  child (``python -m sgl_overlay.harness.child``)
    request dict  -- stdin -->  Job.of(request): a sizing (a scenario's tables) or a flag parse (argv)
    SizingResult.parse / FlagsResult.parse  <-- stdout --  SizingResult.to_json / FlagsResult.to_json

The error record (``ErrorRecord``) says what an exception raised in the child was (``ErrorKind``) and
where it came from (``Origin``); ``outcome.classify`` judges it.  The wire spelling of each enum is its
value, as before the types existed, so a result written by an older child reads the same.

Pure: no import of the child's modules (the parent reads these types without starting one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Job(StrEnum):
    """What one child run does: size a scenario on the tree, or parse server flags with its ServerArgs."""

    SIZING = "sizing"
    FLAGS = "flags"

    @classmethod
    def of(cls, request: Mapping) -> Job:
        """The request's job: ``job`` where given, else a flag parse where it carries ``argv``."""
        if "job" in request:
            return cls(request["job"])
        return cls.FLAGS if "argv" in request else cls.SIZING


class ErrorKind(StrEnum):
    """What an exception raised in the child was."""

    EXCEPTION = "exception"  # any other exception: the outcome depends on its type and origin
    MISSING_INPUT = "missing-input"  # a scenario value the tree reads is not given (standins.MissingInput)
    UNTESTABLE = "untestable"  # the harness cannot drive this tree for this scenario
    ENVIRONMENT = "environment"  # a third-party package missing here, not a property of the tree
    IMPORT = "import"  # a module of the tree (or a stand-in's name) did not import

    @property
    def harness_cannot_drive(self) -> bool:
        """Whether the run says nothing about the tree (the outcome is untestable, whatever the type)."""
        return self in (ErrorKind.MISSING_INPUT, ErrorKind.UNTESTABLE, ErrorKind.IMPORT)


class Origin(StrEnum):
    """Where the innermost frame of an exception's traceback is."""

    TREE = "tree"  # the SGLang tree's own code
    STANDIN = "standin"  # a stand-in module or the targeted loader
    HARNESS = "harness"  # the harness itself (or a child that ended without a result)


# Exception types upstream raises on purpose to refuse a configuration.
DELIBERATE = ("ValueError", "RuntimeError", "NotImplementedError")


@dataclass(frozen=True)
class ErrorRecord:
    """One exception of the child, as plain data (written by ``child.errors.record_of``)."""

    type: str
    message: str
    kind: ErrorKind
    origin: Origin
    where: str | None = None  # the innermost frame in the tree: "path:line (function)"
    mro: tuple[str, ...] = ()  # the class and its bases: a tree's own RuntimeError subclass is still deliberate
    package: str | None = None  # the missing package (kind environment)
    stub_involved: bool = False  # the message or the traceback names a stand-in
    raise_statement: bool = True  # the tree's frame is a ``raise`` statement
    traceback: str | None = None
    standins_touched_sample: tuple[str, ...] = ()

    @classmethod
    def child_failed(cls, returncode: int, stderr: str) -> ErrorRecord:
        """A child that ended without a result."""
        return cls("ChildFailed", f"the child interpreter exited {returncode} without a result; "
                                  f"its stderr ends: {stderr[-1500:]}", ErrorKind.UNTESTABLE, Origin.HARNESS)

    @classmethod
    def parse(cls, d: Mapping | None) -> ErrorRecord | None:
        if not d:
            return None
        return cls(
            type=d.get("type"), message=d.get("message"), kind=ErrorKind(d.get("kind") or ErrorKind.EXCEPTION),
            origin=Origin(d.get("origin") or Origin.HARNESS), where=d.get("where"), mro=tuple(d.get("mro") or ()),
            package=d.get("package"), stub_involved=bool(d.get("stub_involved")),
            raise_statement=bool(d.get("raise_statement", True)), traceback=d.get("traceback"),
            standins_touched_sample=tuple(d.get("standins_touched_sample") or ()))

    def to_json(self) -> dict:
        return {"type": self.type, "mro": list(self.mro), "message": self.message, "kind": self.kind.value,
                "package": self.package, "origin": self.origin.value, "where": self.where,
                "stub_involved": self.stub_involved, "raise_statement": self.raise_statement,
                "traceback": self.traceback, "standins_touched_sample": list(self.standins_touched_sample)}

    def public(self) -> dict:
        """The part a report shows (``--json``'s ``error``)."""
        out = {"type": self.type, "message": self.message, "kind": self.kind.value, "origin": self.origin.value,
               "where": self.where}
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out

    @property
    def deliberate_type(self) -> str | None:
        """The type, or its first base among ``DELIBERATE``; the type itself where none is."""
        if self.type in DELIBERATE:
            return self.type
        return next((b for b in self.mro if b in DELIBERATE), self.type)


@dataclass(frozen=True)
class SizingResult:
    """One sizing run of the child (``Job.SIZING``), as the parent reads it."""

    completed: bool
    figures: dict = field(default_factory=dict)
    error: ErrorRecord | None = None
    ledger: dict | None = None  # the memory ledger (a patched tree's), else None
    readings: dict | None = None  # the sizing's own readings (readings.py)
    drafter_reading: dict | None = None  # draft_reading.py
    notes: list = field(default_factory=list)
    timing: dict = field(default_factory=dict)
    reads: list = field(default_factory=list)
    log: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)  # the SGLang settings (SGLANG_*) it ran under
    layout: str | None = None
    entry_module: str | None = None

    @classmethod
    def parse(cls, d: Mapping) -> SizingResult:
        return cls(completed=bool(d.get("completed")), figures=d.get("figures") or {},
                   error=ErrorRecord.parse(d.get("error")), ledger=d.get("ledger"), readings=d.get("readings"),
                   drafter_reading=d.get("drafter_reading"), notes=d.get("notes") or [],
                   timing=d.get("timing") or {}, reads=d.get("reads") or [], log=d.get("log") or [],
                   environment=d.get("environment") or {}, layout=d.get("layout"),
                   entry_module=d.get("entry_module"))


class FlagsFailure(StrEnum):
    """Why a flag parse gave no fields."""

    FLAG = "flag"  # the release rejects a flag (argparse's own error)
    UNSUPPORTED = "unsupported"  # the release's ServerArgs does not load or run behind the stand-ins


@dataclass(frozen=True)
class FlagsResult:
    """One flag parse of the child (``Job.FLAGS``): the ServerArgs fields the flags set, or why none."""

    fields: dict | None = None  # None where the parse failed
    dropped: list = field(default_factory=list)
    known_flags: int | None = None
    note: str | None = None
    failure: FlagsFailure | None = None
    error: str | None = None
    hints: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @classmethod
    def parse(cls, d: Mapping) -> FlagsResult:
        if d.get("ok"):
            return cls(fields=d.get("fields") or {}, dropped=d.get("dropped") or [],
                       known_flags=d.get("known_flags"), note=d.get("note"))
        err = d.get("error")
        if isinstance(err, Mapping):  # a child that ended without a result (run_child's record)
            err = err.get("message")
        return cls(failure=FlagsFailure(d.get("kind") or FlagsFailure.UNSUPPORTED), error=err,
                   hints=d.get("hints") or [], known_flags=d.get("known_flags"))

    def to_json(self) -> dict:
        if self.ok:
            return {"ok": True, "fields": self.fields, "dropped": self.dropped, "known_flags": self.known_flags,
                    "note": self.note}
        out = {"ok": False, "kind": self.failure.value, "error": self.error}
        if self.failure is FlagsFailure.FLAG:
            out.update(hints=self.hints, known_flags=self.known_flags)
        return out
