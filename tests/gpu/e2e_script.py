"""tools/gpu/e2e.py, the end-to-end check, loaded by its path: it is a
script for the GPU machine (no package to import it from)."""
from tests.by_path import ROOT, load

e2e = load(ROOT / "tools/gpu/e2e.py", "e2e")

# its sibling modules, as e2e.py itself loads them
models, lossless, pools = e2e.models_mod, e2e.lossless, e2e.pools_mod
probe = load(ROOT / "tools/gpu/probe/sglo_probe_logic.py", "sglo_probe_logic")
PROBE_DIR = ROOT / "tools/gpu/probe"
