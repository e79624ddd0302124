"""Files that are no package, loaded by their path: the tools/gpu scripts
(they run on the GPU machine as scripts) and the overlay's ddtree_tree.py.

The loader is tools/gpu/pathload.py's, the one those scripts use; it loads its
own file here as the module ``pathload``, the name the scripts import it by
(run as scripts, their folder is their sys.path[0])."""
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PATHLOAD = ROOT / "tools" / "gpu" / "pathload.py"
_pathload = runpy.run_path(str(_PATHLOAD))["load"](_PATHLOAD, "pathload")
load, sibling = _pathload.load, _pathload.sibling
