"""tools/gpu/e2e.py, the end-to-end check, and its modules, loaded by their paths: they are
scripts for the GPU machine (no package to import them from).  Each module is loaded once,
as e2e.py's modules load each other (pathload.sibling): a monkeypatch of one reaches all."""
from tests.by_path import ROOT, load, sibling

GPU = ROOT / "tools" / "gpu"
e2e = load(GPU / "e2e.py", "e2e")

(e2e_log, e2e_install, e2e_model_dirs, e2e_server, e2e_cases, e2e_lossless_runs, process_groups) = (
    sibling(GPU, n) for n in ("e2e_log", "e2e_install", "e2e_model_dirs", "e2e_server", "e2e_cases",
                              "e2e_lossless_runs", "process_groups"))
models, lossless, pools = (sibling(GPU, n) for n in ("e2e_models", "e2e_lossless", "e2e_pools"))
probe = load(ROOT / "tools/gpu/probe/sglo_probe_logic.py", "sglo_probe_logic")
PROBE_DIR = ROOT / "tools/gpu/probe"
