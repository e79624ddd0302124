"""SGLang v0.5.23 with a topic's port applied, for the ports' tests
(tests/memory, tests/sm120 and tests/ddtree_integration).

``build(series_dir, dest, upto)`` lays the v0.5.23 release tree
(``release_trees.release_tree``, cached and verified) out as upstream has it
(``dest/python/sglang``) and applies the first ``upto`` patches of
``series_dir``'s series (all of them: ``None``) with ``git apply``, in order, strictly (no fuzz,
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

from sgl_overlay import gitcmd, release_trees, series

ROOT = Path(__file__).resolve().parents[1]

RELEASE = "0.5.23"
PORTS = ROOT / "patches" / "ports" / "v0.5.23"


def patches(series_dir: Path) -> list[str]:
    """The series' patch file names, in order (the series file's own rules)."""
    return series.read_series(series_dir)


def touched(series_dir: Path, upto: int | None = None) -> set[str]:
    """Paths (relative to the tree's root) the first ``upto`` patches change."""
    paths = set()
    for name in patches(series_dir)[:upto]:
        for pf in unidiff.PatchSet.from_filename(str(series_dir / name), encoding="utf-8"):
            paths.add(pf.path)
    return paths


def _link_or_copy(src, dst):
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def build(series_dir: Path, dest: Path, upto: int | None = None, on: tuple = ()) -> Path:
    """v0.5.23 + the whole series of each folder in ``on`` (the port series
    this one ``Requires:``), then the first ``upto`` patches of ``series_dir``,
    under ``dest`` (which must not exist); returns ``dest``."""
    release = release_trees.release_tree(RELEASE)
    shutil.copytree(release / "sglang", dest / "python" / "sglang", copy_function=_link_or_copy)
    steps = [(Path(d), None) for d in on] + [(series_dir, upto)]
    for d, n in steps:
        for rel in touched(d, n):
            path = dest / rel
            if path.exists():  # break the hard link: the patch writes this file
                data = path.read_bytes()
                path.unlink()
                path.write_bytes(data)
    gitcmd.init(dest)  # git apply works on the files, whatever repository holds dest
    for d, n in steps:
        for name in patches(d)[:n]:
            gitcmd.run(dest, "apply", "--whitespace=error", str(d / name))
    return dest


# Runs one upstream unit test file in a fresh interpreter with SGLang's
# package __init__ files not executed (they import SGLang's GPU dependencies;
# the module under test and the test need none of them).
_RUN_UPSTREAM_TEST = """
import importlib.util, os, sys, types, unittest
root, path = sys.argv[1], sys.argv[2]
for name in ("sglang", "sglang.srt", "sglang.srt.model_executor", "sglang.test", "sglang.test.ci"):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(root, "python", *name.split("."))]
    sys.modules[name] = package
spec = importlib.util.spec_from_file_location("upstream_unit_test", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = unittest.TextTestRunner(verbosity=2).run(unittest.defaultTestLoader.loadTestsFromModule(module))
sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)
"""


def run_upstream_unit_test(tree: Path, test_file: Path) -> None:
    """Asserts that ``test_file`` (relative to the checkout root: ``test/...``), an upstream-style
    unit test a port adds, passes on ``tree`` (its ``python/`` folder or the root above it), each
    test reported ``ok``; fails when the tree has no such file (a checkout layout is needed)."""
    import subprocess
    import sys

    import pytest

    root = tree.parent if tree.name == "python" else None
    if root is None or not (root / test_file).is_file():
        pytest.fail(f"{test_file} is not in the tree {tree} (a checkout layout with test/ is needed)")
    proc = subprocess.run([sys.executable, "-c", _RUN_UPSTREAM_TEST, str(root), str(root / test_file)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert " ok" in proc.stderr
