"""A module by its file path, for a file that is in no package this one can
import: the overlay's ddtree_tree.py as SGLang gets it, a test oracle where its
tests keep it, kernels copied from a patched tree, the library's remedy parser
(sgl_overlay is not installed on the GPU machine).  Standard library only, and
importing nothing of its package: tools/bench and tests load this file itself
by its path (runpy) to get ``load``.

    from .pathload import load                                          # a module of tools.gpu
    load = runpy.run_path(str(ROOT / "tools/gpu/pathload.py"))["load"]   # elsewhere
"""
import importlib.util
import sys


def load(path, name):
    """The module in the file ``path``, executed and registered as ``name``
    in sys.modules (dataclasses and Triton's source lookups want it there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
