"""SGLang v0.5.23 with the memory topic's port applied, for the port's tests.

``build(dest, upto)`` lays the v0.5.23 release tree (``source.release_tree``,
cached and verified) out as upstream has it (``dest/python/sglang``) and
applies the first ``upto`` patches of ``patches/ports/v0.5.23/memory/series``
(all of them: ``None``) with ``git apply``, in order, strictly (no fuzz,
whitespace errors refused).  The files are hard links into the cache except
those a patch touches, which are copied first, so that the build takes a
second and never writes into the cache.  (That the series also applies with
``git am`` to a git repository of the tree is the export's check.)  Test
support only: the export of ported series is ``tools/stack.py``'s.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import unidiff

from sgl_overlay import gitcmd, series, source
from sgl_overlay.project import ROOT

RELEASE = "0.5.23"
SERIES_DIR = ROOT / "patches" / "ports" / "v0.5.23" / "memory"


def patches() -> list[str]:
    """The series' patch file names, in order (the series file's own rules)."""
    return series.read_series(SERIES_DIR)


def touched(upto: int | None = None) -> set[str]:
    """Paths (relative to the tree's root) the first ``upto`` patches change."""
    paths = set()
    for name in patches()[:upto]:
        for pf in unidiff.PatchSet.from_filename(str(SERIES_DIR / name), encoding="utf-8"):
            paths.add(pf.path)
    return paths


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def build(dest: Path, upto: int | None = None) -> Path:
    """v0.5.23 + the first ``upto`` patches of the port under ``dest``
    (which must not exist); returns ``dest``."""
    release = source.release_tree(RELEASE)
    shutil.copytree(release / "sglang", dest / "python" / "sglang", copy_function=_link_or_copy)
    for rel in touched(upto):
        path = dest / rel
        if path.exists():  # break the hard link: the patch writes this file
            data = path.read_bytes()
            path.unlink()
            path.write_bytes(data)
    gitcmd.init(dest)  # git apply works on the files, whatever repository holds dest
    for name in patches()[:upto]:
        gitcmd.run(dest, "apply", "--whitespace=error", str(SERIES_DIR / name))
    return dest
