"""Locks between processes: one writer per build destination, per cache
entry and per bisect log, like git's index.lock.

Every lock is an ``fcntl.flock`` on a small file.  The kernel releases it
when its holder dies (also under kill -9), so a lock can never be left
behind by a dead process: the next process simply takes it.  The holder
writes its pid (and what it holds the lock for) into the file, only so
that a refused or waiting process can name it.

* ``hold(path, what, wait=0)``: exclusive. ``wait=0`` refuses at once
  (``LockBusy``, exit 2, naming the pid and the lock file); ``wait>0``
  waits that many seconds with a progress line; ``wait=None`` waits as
  long as it takes (caches: two processes wanting the same download share
  it, the second waits for the first and then finds it cached).
* ``hold(..., shared=True)``: many readers (a bisect tree in use), no
  exclusive holder (eviction) meanwhile.
* ``scratch(parent, prefix)`` / ``clean_scratch(parent, pattern)``: a
  temporary directory whose marker file stays locked while its maker
  lives; cleanup removes only directories whose marker lock is free, or
  that have no marker yet and whose maker (its pid is in the name) is gone.
  ``fresh_scratch(parent, prefix)``: the usual pair, the dead makers'
  ``prefix*`` directories removed, then a new one.
"""
import errno
import fcntl
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from .errors import USAGE, OverlayError

MARK = ".sgl-overlay-tmp"          # inside a scratch directory; locked while its maker lives
UNMARKED_GRACE_S = 600             # a scratch directory without its marker yet, its maker unknown: left alone this long
MAKER = re.compile(r"(\d+)\.[^.]+$")  # a scratch directory's name ends in its maker's pid and mkdtemp's letters


class LockBusy(OverlayError):
    code = USAGE


class LockUnavailable(OverlayError):
    code = USAGE


class Held:
    """An acquired lock; ``release()`` (or leaving the ``with``) frees it."""

    def __init__(self, path, fd, what):
        self.path, self.fd, self.what = Path(path), fd, what

    def release(self):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def holder(path):
    """The pid recorded in a lock file (or None)."""
    try:
        first = Path(path).read_text().split("\n", 1)[0].strip()
        return int(first) if first.isdigit() else None
    except OSError:
        return None


def _open(path):
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise LockUnavailable(f"cannot create the lock file {path}: {e.strerror}",
                              hint=f"{path.parent} must be writable (check its permissions, the disk, "
                                   "and that it is not on a read-only file system)") from None


def try_lock(fd, shared):
    """Take the flock on ``fd`` without waiting; False if another holds it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


def _record(fd, what):
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{what}\n".encode(), 0)
    except OSError:
        pass                                   # the pid is only for messages


def _holder_soon(path):
    """The holder's pid; it writes it right after taking the lock, so a
    process that looked in between asks again a few times."""
    for _ in range(20):
        pid = holder(path)
        if pid:
            return pid
        time.sleep(0.01)
    return None


def busy_message(what, path):
    pid = _holder_soon(path)
    return f"{what} is held by " + (f"pid {pid}" if pid else "another process") + f" (lock {path})"


def hold(path, what, wait=0, progress=None, shared=False, hint=None, poll=0.05):
    """Take the lock at ``path`` for ``what`` ("the build of DIR").

    wait: 0 refuse at once if another process holds it (LockBusy, exit 2);
    a number: wait up to that many seconds, saying so once, then refuse;
    None: wait as long as it takes."""
    fd = _open(path)
    try:
        if try_lock(fd, shared):
            if not shared:
                _record(fd, what)
            return Held(path, fd, what)
        if wait is not None and wait <= 0:
            raise LockBusy(busy_message(what, path),
                           hint=hint or "wait for that process to finish, or pass --wait SECONDS to queue behind it; "
                                        "a lock whose process died is free again by itself")
        pid = _holder_soon(path)
        if progress:
            progress(f"waiting for {what} held by " + (f"pid {pid}" if pid else "another process")
                     + (f" (up to {wait:g} s)" if wait is not None else ""))
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            time.sleep(poll)
            poll = min(poll * 1.5, 0.5)
            if try_lock(fd, shared):
                if not shared:
                    _record(fd, what)
                return Held(path, fd, what)
            if deadline is not None and time.monotonic() >= deadline:
                raise LockBusy(busy_message(what, path) + f"; gave up after waiting {wait:g} s",
                               hint=hint or "wait for that process to finish, or give a longer --wait")
    except BaseException:
        os.close(fd)
        raise


def cache_entry(path, what, progress=None):
    """One process at a time fills a cache entry; the others wait (as long
    as it takes, saying so) and then find it filled."""
    return hold(path, what, wait=None, progress=progress)


def is_free(path):
    """True when no living process holds the lock at ``path`` (it exists)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if try_lock(fd, False):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        return False
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# scratch directories

def scratch(parent, prefix, what="an unfinished sgl-overlay build; safe to delete"):
    """(path, Held): a new directory under ``parent`` whose marker stays
    locked while this process lives.

    The marker is created and locked under another name (MARK + ".new") and
    only then renamed to MARK (an flock belongs to the open file, so the
    rename keeps it): a MARK that exists is locked, unless its maker died.
    Were it created under its own name, another process's ``clean_scratch``
    could find it in the moment between its creation and its lock, take it
    for a dead maker's and remove the live directory (CI: a concurrent
    download of another release removed this one's ``.download-*`` folder
    while pip was running).  The name carries this process's pid, so that a
    directory its maker left before the marker existed (killed in that
    moment) is known dead at once."""
    d = Path(tempfile.mkdtemp(dir=parent, prefix=f"{prefix}{os.getpid()}."))
    try:
        held = hold(d / (MARK + ".new"), what)
        try:
            os.rename(d / (MARK + ".new"), d / MARK)
        except BaseException:
            held.release()
            raise
        held.path = d / MARK
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    try:
        with open(d / MARK, "a") as f:        # for people reading the directory
            f.write("an unfinished sgl-overlay build; safe to delete once this pid is gone\n")
    except OSError:
        pass
    return d, held


def fresh_scratch(parent, prefix, what="an unfinished sgl-overlay build; safe to delete"):
    """``scratch(parent, prefix, what)`` after ``clean_scratch(parent, prefix + "*")``:
    what dead processes left under that prefix goes first."""
    clean_scratch(parent, prefix + "*")
    return scratch(parent, prefix, what)


def _maker_gone(name):
    """True when ``name`` ends in a pid (``scratch``'s names do) that no
    process on this machine has."""
    m = MAKER.search(name)
    if not m or int(m.group(1)) in (0, os.getpid()):
        return False
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:                 # alive, another user's
        return False
    return False


def clean_scratch(parent, pattern):
    """Remove the ``pattern`` directories under ``parent`` that a dead
    process left: their marker lock is free.  A directory whose marker lock
    is held belongs to a live process and is never touched; one with no
    marker yet (its maker is between ``mkdtemp`` and the rename of its
    locked marker, or died there) is removed when the pid in its name is no
    living process, or else (a pid reused, a name without one) only when
    older than UNMARKED_GRACE_S."""
    removed = []
    for d in Path(parent).glob(pattern):
        if not d.is_dir() or d.is_symlink():
            continue
        mark = d / MARK
        if mark.exists():
            try:
                fd = os.open(mark, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not try_lock(fd, False):
                    continue                   # alive
                _remove(d)
                removed.append(d)
            finally:
                os.close(fd)
        else:
            try:
                old = _maker_gone(d.name) or time.time() - d.stat().st_mtime > UNMARKED_GRACE_S
            except OSError:
                continue
            if old:
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


def _remove(d, tries=20):
    """rmtree, again while a dead maker's orphaned child (git, pip) may
    still be writing its last files there."""
    for _ in range(tries):
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            return
        time.sleep(0.1)


def dest_lock_path(dest):
    """The lock file of a build destination: beside it, ``.NAME.lock``."""
    dest = Path(dest)
    return dest.parent / f".{dest.name}.lock"
