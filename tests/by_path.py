"""Files that are in no package the tests can import, loaded by their path: the
overlay's ddtree_tree.py, SGLang's own modules of an unpacked tree, tools/bench's
scripts, tools/gpu/probe (a sitecustomize folder, imported by its top-level names
inside a server).  The GPU tools themselves are the package tools.gpu, imported
as any package is.

The loader is tools/gpu/pathload.py's, the one those tools use for the same
purpose; it is loaded here as the module ``pathload``."""
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PATHLOAD = ROOT / "tools" / "gpu" / "pathload.py"
load = runpy.run_path(str(_PATHLOAD))["load"]
