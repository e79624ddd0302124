"""tools.gpu.spec_value's modules, imported from the package; the allocation probe loaded by
its path (tools/gpu/probe: a server imports it by its top-level name); and the SpecForge wheel the
pair's drafter is trained with, fetched once into the test cache."""
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.by_path import ROOT, load
from tools.gpu import spec_accept as accept, spec_bench as bench, spec_pair as pair  # noqa: F401
from tools.gpu import spec_profile as profile, spec_prompts as prompts  # noqa: F401

probe = load(ROOT / "tools/gpu/probe/sglo_probe_logic.py", "sglo_probe_logic")



def tool(name, *args):
    """The command line of ``python3 -m tools.gpu.NAME ARGS`` (run it with cwd=ROOT, as docs/gpu.md does)."""
    return [sys.executable, "-m", f"tools.gpu.{name}", *map(str, args)]


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
