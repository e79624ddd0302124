"""The bisection log (JSON lines): a start record, one ``Result`` per test
execution, a verdict record (``verdict.Record.to_json``)."""
import dataclasses
import json
import os
import threading
from pathlib import Path

from .. import TOOL_VERSION, locking
from ..errors import UsageError
from .strategy import Phase
from .terms import Raw, Term

LOG_SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Result:
    """One test execution at a point, as the log keeps it."""
    point: str                      # the point's id
    phase: Phase
    batch: int                      # the round of decide() it was run in
    run: int                        # 1..--runs at this point
    raw: Raw
    term: Term
    code: int                       # the test's exit status (125 for a step that cannot be built)
    seconds: float
    summary: str = ""
    output: str = ""
    dropped: tuple | None = None    # patches dropped at this step (already upstream); None: no stack step

    def why(self, tail):
        """The test's own words: its summary, or the end of its output."""
        return self.summary or self.output[-tail:]

    def to_json(self):
        return {"type": "result", "point": self.point, "phase": self.phase, "batch": self.batch, "run": self.run,
                "raw": self.raw, "term": self.term, "code": self.code, "seconds": self.seconds,
                "summary": self.summary, "output": self.output,
                "notes": {} if self.dropped is None else {"dropped": list(self.dropped)}}

    @classmethod
    def from_json(cls, d):
        notes = d.get("notes") or {}
        return cls(point=d["point"], phase=Phase(d["phase"]) if d.get("phase") else None, batch=d.get("batch", 0),
                   run=d.get("run", 1), raw=Raw(d["raw"]), term=Term(d["term"]), code=d.get("code"),
                   seconds=d.get("seconds"), summary=d.get("summary") or "", output=d.get("output") or "",
                   dropped=tuple(notes["dropped"]) if "dropped" in notes else None)


class Log:
    """Append-only JSON lines: a ``start`` record (the whole configuration),
    one ``result`` record per test execution as it comes, a ``verdict``."""

    def __init__(self, path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.held = None

    @property
    def lock_path(self):
        return self.path.parent / f".{self.path.name}.lock"

    def own(self):
        """Become the log's one live writer (``.NAME.lock`` beside it), or
        refuse at once naming the pid that writes it (exit 2).  Held until
        this process ends."""
        try:
            self.held = locking.hold(self.lock_path, f"the bisection log {self.path}", wait=0,
                                     hint=f"another tools/bisect.py is writing this log; wait for it to end, or watch "
                                          f"it with --replay {self.path} (a log whose bisect died is free again)")
        except locking.LockUnavailable as e:
            raise UsageError(e.message.replace("the lock file", "the log's lock file"), hint=e.hint) from None
        return self

    def create(self, header):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.own()
        if self.path.exists():
            raise UsageError(f"log {self.path} already exists",
                             hint=f"continue it with --resume {self.path}, or choose another --log")
        tmp = self.path.parent / f".{self.path.name}.new"
        with open(tmp, "w") as f:              # the log appears whole, with its start record, or not at all
            f.write(json.dumps({"type": "start", "schema": LOG_SCHEMA, "tool_version": TOOL_VERSION, **header},
                               sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def repair(self):
        """Cut a torn last line (a crash mid-write) before appending again."""
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        if cut < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(cut)
            return True
        return False

    def append(self, result):
        """One ``Result``, as it comes."""
        self._write(result.to_json())

    def close(self, record):
        """The verdict ``Record``: the last line of a finished log."""
        self._write({"type": "verdict", **record.to_json()})

    def _write(self, record):
        with self._lock, open(self.path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def read(path):
        """(header, results, verdict or None): the start record, the
        ``Result``s, the verdict record as written; a torn last line (a
        crash mid-write) is dropped, any other bad line is an error."""
        path = Path(path)
        try:
            lines = path.read_text().split("\n")
        except OSError as e:
            raise UsageError(f"log {path}: cannot read it ({e.strerror})", hint="give the path bisect printed")
        header, results, verdict = None, [], None
        last = max((i for i, l in enumerate(lines) if l.strip()), default=-1)
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                if n == last:
                    break
                raise UsageError(f"log {path}:{n + 1}: not a JSON record", hint="the log was edited or damaged")
            t = rec.get("type")
            if t == "start":
                header = rec
            elif t == "result":
                results.append(Result.from_json(rec))
            elif t == "verdict":
                verdict = rec
        if header is None or header.get("schema") != LOG_SCHEMA:
            raise UsageError(f"log {path}: no start record of schema {LOG_SCHEMA}",
                             hint="this is not a log written by tools/bisect.py")
        return header, results, verdict


def known_from(results, points):
    """Point id -> list of terms, from the log's result records (aborted
    runs left out: the test is run again there once it is fixed)."""
    known = {}
    for r in results:
        if r.point in points and r.raw is not Raw.ABORT:     # an aborted run is run again after the fix
            known.setdefault(r.point, []).append(r.term)
    return known
