"""tools.gpu.e2e, the end-to-end check, and its modules, imported from the package; the
allocation probe (tools/gpu/probe, a sitecustomize folder a server imports by its top-level
names) loaded by its path under the name it has there."""
from tests.by_path import ROOT, load
from tools.gpu import (e2e, e2e_cases, e2e_install, e2e_log, e2e_lossless_runs, e2e_model_dirs,  # noqa: F401
                       e2e_server, process_groups)
from tools.gpu import e2e_lossless as lossless, e2e_models as models, e2e_pools as pools  # noqa: F401

probe = load(ROOT / "tools/gpu/probe/sglo_probe_logic.py", "sglo_probe_logic")
PROBE_DIR = ROOT / "tools/gpu/probe"
