"""tools/gpu/e2e.py, the end-to-end check, loaded by its path: it is a
script for the GPU machine (no package to import it from)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("e2e", ROOT / "tools/gpu/e2e.py")
e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(e2e)

# its sibling modules, as e2e.py itself loads them
models, lossless, pools = e2e.models_mod, e2e.lossless, e2e.pools_mod
_spec = importlib.util.spec_from_file_location("sglo_probe_logic", ROOT / "tools/gpu/probe/sglo_probe_logic.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
PROBE_DIR = ROOT / "tools/gpu/probe"
