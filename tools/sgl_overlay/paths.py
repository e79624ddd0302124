"""Checking paths that come from outside (patches, overlay, archives, lock)
before anything is written: relative, normalized, no '..', no absolute
paths, no backslashes or NULs, never into a .git directory, and, once
joined to a root, still inside it after resolving symlinks.
"""
import os
from pathlib import Path, PurePosixPath

from .errors import UsageError


def relpath(p, what, where, exc=UsageError, under=None):
    """Return ``p`` as a clean relative POSIX path, or raise ``exc``."""
    bad = None
    if not isinstance(p, str) or not p:
        bad = "is empty"
    elif "\0" in p or "\\" in p:
        bad = "contains a NUL or a backslash"
    else:
        pp = PurePosixPath(p)
        if pp.is_absolute():
            bad = "is absolute"
        elif ".." in pp.parts:
            bad = "climbs out with '..'"
        elif str(pp) != p.rstrip("/") or p.startswith("./") or "/./" in p:
            bad = "is not normalized"
        elif ".git" in pp.parts:
            bad = "points into a .git directory"
        elif under is not None and (pp.parts[:len(PurePosixPath(under).parts)] != PurePosixPath(under).parts):
            bad = f"is outside {under}/"
    if bad:
        raise exc(f"{where}: {what} path {p!r} {bad}",
                  hint="paths must be relative, normalized and stay inside the tree"
                       + (f" (under {under}/)" if under else ""))
    return p


def inside(root, rel, what, where, exc=UsageError):
    """Join ``rel`` to ``root`` and make sure the result (its parent resolved
    through any symlinks) stays inside ``root``."""
    root = Path(root).resolve()
    target = root / rel
    parent = target.parent.resolve()
    if parent != root and root not in parent.parents:
        raise exc(f"{where}: {what} path {rel!r} resolves outside the tree (through a symlink)",
                  hint="remove the symlink or the path that escapes the tree")
    return target


def fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
