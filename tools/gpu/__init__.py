"""The GPU machine's tools, one package run with ``python3 -m`` from the
checkout's root (docs/gpu.md):

    python3 -m tools.gpu.e2e --bundle build/bundle --out DIR
    python3 -m tools.gpu.spec_value run --model pair ...

Standard library only at import time: the GPU machine runs these from a copy of
the tree with its own torch and Python, where neither sgl_overlay's dependencies
nor the package itself are installed; what needs torch, transformers or SGLang
imports it inside the function that uses it.  ``tools`` is a namespace package
(no ``__init__.py``: the scripts in tools/ stay scripts, and SGLang's wheels
install a namespace ``tools`` of their own, which merges with it).

A helper interpreter that imports a module of this package (a drafter's
training, the models written with torch) runs ``from {PACKAGE} import X`` with
``child_pythonpath()``: the folder this package is imported from, then the folders
it names."""
import os
from pathlib import Path

PACKAGE = __name__        # what a helper interpreter imports this package's modules from: "tools.gpu"
# the folder that holds the top-level package (the checkout's root for tools.gpu)
IMPORT_ROOT = Path(__file__).resolve().parents[__name__.count(".") + 1]


def child_pythonpath(*more, first=None) -> str:
    """PYTHONPATH for a helper interpreter that runs ``from <this package> import X``: ``first`` (a
    folder that must win over it, if any), the folder the package is imported from, then ``more``
    (its dependencies' folders, in order)."""
    return os.pathsep.join(map(str, (*filter(None, [first]), IMPORT_ROOT, *more)))
