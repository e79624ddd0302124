"""tools/gpu/spec_value.py and its modules, loaded by their paths (scripts for the GPU machine),
and the SpecForge wheel the pair's drafter is trained with, fetched once into the test cache."""
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.by_path import ROOT, load, sibling

GPU = ROOT / "tools" / "gpu"
spec_value = load(GPU / "spec_value.py", "spec_value")
bench, pair, profile, prompts, accept = (sibling(GPU, n) for n in ("spec_bench", "spec_pair", "spec_profile", "spec_prompts",
                                                                  "spec_accept"))
probe = load(ROOT / "tools/gpu/probe/sglo_probe_logic.py", "sglo_probe_logic")

SPECFORGE = "specforge-0.2.0-py3-none-any.whl"
SPECFORGE_SHA256 = "fbc79517adf483c6a8beea52561b1a8c8c8a99a54c820b47d2033a73966b55b0"


def specforge_tree(dest):
    """SpecForge 0.2.0's package unpacked into dest (the wheel fetched once with pip, --no-deps:
    its pins, torch 2.11 and sglang 0.5.14, are the GPU machine's business, not this one's)."""
    cache = Path(os.environ["SGL_OVERLAY_CACHE"]) / "wheels"
    whl = cache / SPECFORGE
    if not whl.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache),
                        "specforge==0.2.0"], check=True)
    got = hashlib.sha256(whl.read_bytes()).hexdigest()
    assert got == SPECFORGE_SHA256, f"{whl}: sha256 {got}"
    with zipfile.ZipFile(whl) as z:
        z.extractall(dest)
    return Path(dest)
