"""Where a checkout's port session lives (``Places``) and how it is kept:
digests of patches/ and the lock, files written whole (temp file + rename),
the state saved and loaded, the session folder removed with one rename."""
import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from ...errors import IntegrityError, UsageError
from .. import ports
from .state import Session

SESSION = Path("build") / "port"
RR_CACHE = Path("build") / "port-rr-cache"


@dataclasses.dataclass(frozen=True)
class Places:
    """Where a checkout's session lives."""
    root: Path

    @property
    def session(self):
        return self.root / SESSION

    @property
    def tree(self):
        return self.session / "tree"

    @property
    def state(self):
        return self.session / "session.json"

    @property
    def new_lock(self):
        return self.session / "upstream.lock.new"

    @property
    def stage(self):
        return self.session / "stage"

    @property
    def staged_patches(self):
        return self.stage / "patches"

    @property
    def range_diff(self):
        return self.session / "range-diff.txt"

    @property
    def rr_cache(self):
        return self.root / RR_CACHE

    @property
    def staged_port(self):
        """A topic port's new series folder, staged."""
        return self.stage / "port"

    @property
    def patches(self):
        return self.root / "patches"

    @property
    def lock(self):
        return self.root / "upstream.lock"

    def port(self, s):
        """A topic port's series folder, ``patches/ports/<label>/<topic>``."""
        return self.root / ports.PORTS / s.label / s.topic


def file_digest(path):
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def dir_digest(path):
    """sha256 over every file (name, bytes) and symlink (name, target)
    under ``path``; None when it does not exist."""
    path = Path(path)
    if not path.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix().encode()
        if p.is_symlink():
            h.update(b"l\0" + rel + b"\0" + os.readlink(p).encode() + b"\0")
        elif p.is_file():
            data = p.read_bytes()
            h.update(b"f\0" + rel + b"\0%d\0" % len(data) + data)
    return h.hexdigest()


def atomic_write(path, text):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save(places, session):
    """Write the state (temp file + rename: whole or not at all)."""
    write_state(places.state, session)
    return session


def write_state(path, session):
    atomic_write(Path(path), json.dumps(session.to_json(), indent=2, sort_keys=True) + "\n")


def load(places):
    """The session in ``places``; UsageError (exit 2) when there is none."""
    if not places.session.exists():
        raise UsageError(f"no port session in {places.session}",
                         hint="start one: python tools/stack.py port --onto VERSION [--repo URL_OR_PATH], or "
                              "for one topic: python tools/stack.py port --topic T --onto VERSION")
    try:
        return Session.from_json(json.loads(places.state.read_text()))
    except FileNotFoundError:
        raise UsageError(f"{places.session} holds no session.json: it is not a port session",
                         hint="move that folder away (or delete it), then start again") from None
    except (ValueError, KeyError, TypeError) as e:
        raise IntegrityError(f"{places.state} is damaged: {e}",
                             hint="python tools/stack.py port --abort removes the session (patches/ and "
                                  "upstream.lock are never written before the phase 'finishing')") from None


def remove_session(places):
    """The session folder goes with one rename (a kill leaves it whole or
    gone), then is deleted."""
    gone = places.session.parent / f".port-removed-{os.getpid()}"
    shutil.rmtree(gone, ignore_errors=True)
    os.rename(places.session, gone)
    shutil.rmtree(gone, ignore_errors=True)


