"""Which checkout a command works on, and where the tools keep their cache.

A checkout is a folder holding ``upstream.lock``, ``patches/series`` and
``overlay/``.  A command works on the checkout given with ``--root DIR``;
else, run through a shim (``python CHECKOUT/tools/NAME.py``), on the
shim's own checkout; else on the nearest checkout at or above the current
directory.  Nothing here looks at where the library is installed: one
installed library (editable or not) serves every checkout, and each run
reads and writes only its own.
"""
import os
from pathlib import Path

from .errors import UsageError

CACHE_ENV = "SGL_OVERLAY_CACHE"

# What makes a folder a checkout (the names, relative to it).
MARKERS = ("upstream.lock", "patches/series", "overlay")

# Set by the shims in tools/ to their own checkout, for the one process they
# start; __main__ takes it out of the environment (shim_checkout below), so
# that a tool started from there finds its own checkout as any other would.
SHIM_ENV = "SGL_OVERLAY_SHIM_CHECKOUT"

_shim_checkout = None


def take_shim_checkout(environ=os.environ):
    """Remember the checkout a shim passed and remove it from ``environ``
    (the process's children must not inherit it)."""
    global _shim_checkout
    value = environ.pop(SHIM_ENV, None)
    if value:
        _shim_checkout = Path(value)


def missing(path):
    """The markers ``path`` lacks (empty: it is a checkout)."""
    path = Path(path)
    return [m for m in MARKERS
            if not ((path / m).is_dir() if m == "overlay" else (path / m).is_file())]


def find_root(explicit=None, start=None):
    """The checkout to work on (an absolute Path): ``explicit`` (--root),
    else the shim's checkout, else the nearest checkout at or above
    ``start`` (default: the current directory).  A UsageError (exit 2) that
    names what was looked for and where when there is none."""
    wanted = ", ".join(m + ("/" if m == "overlay" else "") for m in MARKERS)
    given = explicit or _shim_checkout
    if given:
        path = Path(given).expanduser().resolve()
        lacks = missing(path)
        if lacks:
            flag = f"--root {explicit}" if explicit else f"the checkout of the script ({path})"
            raise UsageError(f"{flag} is not an sgl-overlay checkout: {path} lacks {', '.join(lacks)}",
                             hint=f"give --root a folder that holds {wanted}")
        return path
    here = Path(start or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if not missing(folder):
            return folder
    raise UsageError(f"no sgl-overlay checkout at or above {here}: looked in each folder from there up to "
                     f"{here.anchor} for one that holds {wanted}",
                     hint="run the command inside a checkout of sgl-overlay (or a git worktree of one), "
                          "or give --root DIR")


def cache_dir(override=None):
    """Where the tools keep downloads, release trees, clones and compiled code:
    ``override`` (--cache), else $SGL_OVERLAY_CACHE, else
    $XDG_CACHE_HOME/sgl-overlay (~/.cache/sgl-overlay).  Shared by every
    checkout: what it holds is keyed by content and verified by sha256."""
    if override:
        return Path(override).expanduser().resolve()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "sgl-overlay"
