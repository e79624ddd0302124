"""Reading a release archive (a wheel, or an sdist whose members sit under
NAME-VERSION/), every member checked before anything is written: absolute
paths, '..', links and devices are refused (IntegrityError, exit 3).

``extract_package`` writes a package directory out; ``unpack_to_index``
writes it into a git work tree and index at once (the base tree of a build,
base_tree.py); ``release_metadata`` reads a wheel's METADATA."""
import fnmatch
import os
import re
import signal
import stat
import tarfile
import zipfile
from pathlib import Path

from . import gitcmd
from .errors import IntegrityError, OverlayError, UsageError
from .paths import relpath


def iter_members(archive, root):
    """Yield ``(rel, read)`` for each regular file of ``archive`` under
    ``root/`` (wheel/zip, or an sdist whose members sit under
    NAME-VERSION/), ``rel`` relative to ``root``. Every member name is
    checked first: absolute paths, '..', links and devices are refused."""
    archive = Path(archive)
    where = f"artifact {archive.name}"
    prefix = root.rstrip("/") + "/"
    bad_kind = dict(hint="the artifact is not what the release published; re-download it")
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                name = info.filename
                relpath(name.rstrip("/"), "member", where, exc=IntegrityError)
                if not name.startswith(prefix) or info.is_dir():
                    continue
                mode = info.external_attr >> 16
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
                    raise IntegrityError(f"{where}: member {name!r} is not a regular file", **bad_kind)
                yield name[len(prefix):], (lambda info=info: z.read(info))
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                relpath(m.name.rstrip("/"), "member", where, exc=IntegrityError)
                name = m.name.split("/", 1)[1] if "/" in m.name else ""  # NAME-VERSION/sglang/...
                if not name.startswith(prefix) or m.isdir():
                    continue
                if not m.isfile():
                    raise IntegrityError(f"{where}: member {m.name!r} is not a regular file", **bad_kind)
                yield name[len(prefix):], (lambda m=m: t.extractfile(m).read())


def _write(dest, rel, data, made):
    out = dest / rel
    if out.parent not in made:
        out.parent.mkdir(parents=True, exist_ok=True)
        made.add(out.parent)
    with open(out, "wb") as f:
        f.write(data)
    return out


def _holds_nothing(archive, root):
    return IntegrityError(f"artifact {Path(archive).name}: holds no {root}/ directory",
                          hint="the artifact is not an SGLang release")


def extract_package(archive, root, dest):
    """Extract ``root/`` of ``archive`` into ``dest``; returns the paths."""
    dest = Path(dest)
    made = set()
    written = [rel for rel, read in iter_members(archive, root) if _write(dest, rel, read(), made)]
    if not written:
        raise _holds_nothing(archive, root)
    return written


def unpack_to_index(artifact, root, repo_dir, subdir, generated=(), compiled=(), symlinks=None, executable=()):
    """Unpack ``root/`` of ``artifact`` into ``repo_dir/subdir`` and its git
    index: generated and compiled files left out, the listed symlinks made,
    the listed files executable.  Paths are handed to git as they are
    written, so hashing (git) and inflating (here) run side by side.
    Returns the set of member paths seen."""
    gitcmd.init(repo_dir)
    pkg = Path(repo_dir) / subdir
    symlinks = symlinks or {}
    executable = set(executable)
    add = gitcmd.popen(repo_dir, "update-index", "--add", "-z", "--stdin")
    made, seen = set(), set()
    broken = False
    try:
        for rel, read in iter_members(artifact, root):
            seen.add(rel)
            if rel in generated or any(fnmatch.fnmatch(rel, pat) for pat in compiled):
                continue
            if rel in symlinks:
                (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(symlinks[rel], pkg / rel)
            else:
                out = _write(pkg, rel, read(), made)
                if rel in executable:
                    out.chmod(0o755)
            add.stdin.write(f"{subdir}/{rel}".encode() + b"\0")
    except BrokenPipeError:
        broken = True                          # git stopped reading: its exit status says why
    finally:
        try:
            add.stdin.close()                  # flushes: a pipe whose reader died (Ctrl-C reached it too)
        except BrokenPipeError:                # must not replace the KeyboardInterrupt on its way out
            broken = True
        rc = add.wait()
    if rc == -signal.SIGINT:
        raise KeyboardInterrupt                # Ctrl-C stopped git first: the run was interrupted
    if rc != 0 or broken:
        raise OverlayError(f"git update-index failed while adding {subdir} to {repo_dir} "
                           f"({'exit ' + str(rc) if rc >= 0 else 'signal ' + str(-rc)}"
                           f"{', stopped reading its input' if broken else ''})",
                           hint="run again; if it fails again, check the disk and the git installation")
    if not seen:
        raise _holds_nothing(artifact, root)
    return seen


def release_metadata(wheel):
    """The METADATA text (Requires-Dist etc.; ``versions.pins`` reads it) of
    a release's wheel."""
    with zipfile.ZipFile(wheel) as z:
        name = next((n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)), None)
        if name is None:
            raise UsageError(f"{Path(wheel).name} has no .dist-info/METADATA",
                             hint=f"delete {wheel} from the cache and run again")
        return z.read(name).decode("utf-8", "replace")
