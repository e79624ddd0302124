"""Load the DDTree overlay module by file path (it is laid into SGLang's tree
at python/sglang/srt/speculative/ddtree_tree.py and imports nothing from SGLang)."""

import importlib.util
import os
import sys

import pytest
import torch

# one intra-op thread per xdist worker: avoids OpenMP oversubscription on small CI boxes
torch.set_num_threads(1)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PATH = os.path.join(_ROOT, "overlay", "python", "sglang", "srt", "speculative", "ddtree_tree.py")


def load_ddtree():
    name = "ddtree_tree_overlay"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def dd():
    return load_ddtree()
