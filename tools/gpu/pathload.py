"""A module by its file path, for the scripts that load a file that is no
package (the overlay's ddtree_tree.py as SGLang gets it, a test oracle where
its tests keep it, kernels copied from a patched tree).  Standard library
only: tools/gpu runs on the GPU machine with plain python3 from a copy of the
tree, where neither sgl_overlay nor tests is importable.

    from pathload import load, sibling             # a script in tools/gpu
    e2e_log = sibling(HERE, "e2e_log")             # a module of the same folder, loaded once
    load = runpy.run_path(str(ROOT / "tools/gpu/pathload.py"))["load"]   # elsewhere
"""
import importlib.util
import sys
from pathlib import Path


def load(path, name):
    """The module in the file ``path``, executed and registered as ``name``
    in sys.modules (dataclasses and Triton's source lookups want it there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    sys.modules[name] = mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sibling(here, name):
    """The module ``name`` of the file ``here/name.py``, loaded once: the
    modules of one script (tools/gpu/e2e*.py) load each other by this, so
    each is one module object however many load it (one process registry,
    one place a test's monkeypatch reaches)."""
    path = (Path(here) / f"{name}.py").resolve()
    mod = sys.modules.get(name)
    if mod is not None and getattr(mod, "__file__", None) and Path(mod.__file__).resolve() == path:
        return mod
    return load(path, name)
