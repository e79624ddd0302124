"""--wheel: the pinned release wheel with the stack's files in place,
installed for real into a fresh virtual environment."""
import json
import subprocess
import sys
import zipfile

from tests.apply.support import SIZING, POOL

PROBE = r"""
import base64, hashlib, json, sys
from importlib import metadata
d = metadata.distribution("sglang")
bad = []
for f in d.files:
    if f.hash is None:
        continue
    data = f.read_binary()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    if f.hash.value != digest or f.size != len(data):
        bad.append(str(f))
root = d.locate_file("sglang")
print(json.dumps({
    "version": d.version, "requires": d.requires, "bad": bad, "nfiles": len(d.files),
    "pool": (root / "srt/model_executor/pool_configurator.py").read_text(),
    "sizing": (root / "srt/mem_cache/kv_cache_configurator.py").read_text(),
    "added": (root / "srt/speculative/extra_module.py").read_text(),
    "so": [str(f) for f in d.files if str(f).endswith(".so")],
    "version_py": (root / "_version.py").read_text(),
}))
"""


def test_patched_wheel_installs_with_the_patched_files(project, patches, lock, tmp_path):
    text, _ = patches.make([(POOL, 'msg = "Not enough memory.', 'msg = "Not enough memory (patched).')])
    gone, _ = patches.make([(SIZING, "import logging\n", "import logging  # wheel\n")], subject="Second")
    project.series(["p.patch", "q.patch"], {"p.patch": text, "q.patch": gone})
    project.overlay("python/sglang/srt/speculative/extra_module.py", "ADDED = True\n")
    out = tmp_path / "dist"
    r = project.apply("--wheel", str(out), "--json")
    assert r.returncode == 0, r.stderr
    w = r.data["wheel"]
    digest = r.data["manifest"]["stack_digest"]
    assert w["version"] == f"{lock.version}+overlay.{digest[:12]}"
    assert w["path"].endswith(f"sglang-{w['version']}-{lock.wheel_tags}.whl")
    assert sorted(w["changed"]) == ["sglang/srt/mem_cache/kv_cache_configurator.py",
                                    "sglang/srt/model_executor/pool_configurator.py",
                                    "sglang/srt/speculative/extra_module.py"]
    assert [p.name for p in out.iterdir()] == [w["path"].rsplit("/", 1)[1]]   # no temp files left
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    inst = subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                           w["path"]], capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr
    got = json.loads(subprocess.run([py, "-c", PROBE], capture_output=True, text=True, check=True).stdout)
    assert got["version"] == w["version"]
    assert "Not enough memory (patched)." in got["pool"]
    assert "import logging  # wheel" in got["sizing"]
    assert got["added"] == "ADDED = True\n"
    assert got["bad"] == []                      # every RECORD hash and size matches the installed file
    assert got["so"], "the release's compiled modules are kept"
    assert f"'{w['version']}'" in got["version_py"]
    with zipfile.ZipFile(_pinned(lock)) as z:
        meta = z.read(f"sglang-{lock.version}.dist-info/METADATA").decode()
        release_files = {i.filename.replace(f"-{lock.version}.dist-info", "-X.dist-info")
                         for i in z.infolist() if not i.is_dir()}
    with zipfile.ZipFile(w["path"]) as z:
        ours = {i.filename.replace(f"-{w['version']}.dist-info", "-X.dist-info")
                for i in z.infolist() if not i.is_dir()}
    release_requires = [l.split(": ", 1)[1] for l in meta.splitlines() if l.startswith("Requires-Dist: ")]
    assert got["requires"] == release_requires   # SGLang's own pins come along
    assert ours - release_files == {"sglang/srt/speculative/extra_module.py"}   # added by the overlay
    assert release_files - ours == set()
    pipcheck = subprocess.run([py, "-m", "pip", "show", "sglang"], capture_output=True, text=True)
    assert f"Version: {w['version']}" in pipcheck.stdout


def _pinned(lock):
    from sgl_overlay import artifacts
    return artifacts.pinned(lock).path
