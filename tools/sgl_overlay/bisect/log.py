"""The bisection log (JSON lines)."""
import json
import os
import threading
from pathlib import Path

from .. import TOOL_VERSION, locking
from ..errors import UsageError

LOG_SCHEMA = 1


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

    def append(self, record):
        with self._lock, open(self.path, "a") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    @staticmethod
    def read(path):
        """(header, results, verdict or None); a torn last line (a crash
        mid-write) is dropped, any other bad line is an error."""
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
                results.append(rec)
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
        if r["point"] in points and r["raw"] != "abort":     # an aborted run is run again after the fix
            known.setdefault(r["point"], []).append(r["term"])
    return known
