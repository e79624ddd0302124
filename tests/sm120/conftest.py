"""Fixtures of the sm120 tests (support.py holds the simulated devices)."""
import contextlib
import os

import pytest

from sgl_overlay.harness.child import loader
from sgl_overlay.harness.layout import source_root

from .support import DEVICES, simulate, tree_helpers


@pytest.fixture
def on_device(monkeypatch):
    """``with on_device(tree, "rtx-pro-6000", [modules], **fakes) as load:``
    simulate the device, load ``modules`` from ``tree`` (a directory holding
    ``sglang/`` or ``python/sglang/``) with the tree's helpers plus ``fakes``;
    ``load(name)`` imports one of them.  Everything is undone on exit,
    including the environment variables upstream sets through ``envs.X.set``."""

    @contextlib.contextmanager
    def enter(tree, device_key: str, real: list, **fakes):
        simulate(monkeypatch, DEVICES[device_key])
        root = source_root(tree)
        given = tree_helpers(root)
        given.update(fakes)
        environ = dict(os.environ)
        try:
            with loader.installed(root, ["sglang.srt.environ", *real], given):
                yield loader.load
        finally:
            os.environ.clear()
            os.environ.update(environ)

    return enter


@pytest.fixture
def sglang_tree(request):
    """Indirect parameter: "pristine" (the pinned release) or "patched"."""
    return request.getfixturevalue(f"{request.param}_tree")
