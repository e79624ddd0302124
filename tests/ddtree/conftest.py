"""Load the DDTree overlay module by file path (it is laid into SGLang's tree
at python/sglang/srt/speculative/ddtree_tree.py and imports nothing from SGLang)."""

import os
import sys

import pytest
import torch

from tests.by_path import load

# one intra-op thread per xdist worker: avoids OpenMP oversubscription on small CI boxes
torch.set_num_threads(1)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PATH = os.path.join(_ROOT, "overlay", "python", "sglang", "srt", "speculative", "ddtree_tree.py")


def load_ddtree():
    return sys.modules.get("ddtree_tree_overlay") or load(_PATH, "ddtree_tree_overlay")


@pytest.fixture(scope="session")
def dd():
    return load_ddtree()
