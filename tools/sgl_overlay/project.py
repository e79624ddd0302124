"""Where the project's own files are (the checkout that holds upstream.lock,
patches/ and overlay/) and where the tools keep their cache.

The package is installed from the checkout (``pip install -e .``), so the
checkout is two folders above this file.  Every command takes ``--root`` to
point at another one.
"""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUILD = ROOT / "build" / "sglang"

CACHE_ENV = "SGL_OVERLAY_CACHE"


def cache_dir(override=None):
    """Where the tools keep downloads, release trees, clones and compiled code:
    ``override`` (--cache), else $SGL_OVERLAY_CACHE, else
    $XDG_CACHE_HOME/sgl-overlay (~/.cache/sgl-overlay)."""
    if override:
        return Path(override).expanduser().resolve()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base).resolve() / "sgl-overlay"
