"""Installing an offline bundle (tools/bundle.py; docs/gpu.md) on the GPU machine, without
network: the runtime wheels into WORK/deps, the patched wheel into WORK/patched and the
release's own tree rebuilt beside it into WORK/pristine (proven by the release's RECORD), or
a pristine bundle's release wheel alone; and the import-only stand-ins (STUBS) for what the
server imports at module level but neither the machine nor the bundle has
(tests/gpu/test_e2e_stubs.py, test_bundle_release.py)."""
import base64
import fnmatch
import hashlib
import importlib.util
import json
import shutil
import sys
import zipfile
from pathlib import Path

from .process_groups import GROUPS     # pip ends with the check


def install(bundle, work):
    bundle, work = Path(bundle), Path(work)
    manifest = json.loads((bundle / "bundle.json").read_text())
    deps = [str(bundle / c["file"]) for c in manifest["chosen"]]
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check"]
    if deps:
        GROUPS.run(pip + ["--target", str(work / "deps")] + deps, check=True)
    if not manifest.get("patched_wheel"):
        # a pristine bundle of another release (tools/bundle.py --release): its own wheel, no stack
        GROUPS.run(pip + ["--target", str(work / "pristine"), str(bundle / manifest["release_wheel"])], check=True)
        return {"stubs": _stubs(work), "bundle_total": manifest["total"], "release": manifest.get("release"),
                "pristine_only": True}
    GROUPS.run(pip + ["--target", str(work / "patched"), str(bundle / manifest["patched_wheel"])], check=True)
    # the release's own tree: the patched one with the release's files put back, proven by its RECORD
    pristine = work / "pristine"
    shutil.copytree(work / "patched" / "sglang", pristine / "sglang")
    with zipfile.ZipFile(bundle / manifest["release_delta"]["file"]) as z:
        for n in z.namelist():
            if n.startswith("files/") and not n.endswith("/"):
                (pristine / n[len("files/"):]).parent.mkdir(parents=True, exist_ok=True)   # a folder the stack removed
                (pristine / n[len("files/"):]).write_bytes(z.read(n))
        for a in z.read("added.txt").decode().split():
            (pristine / a).unlink()
        record = z.read("RECORD").decode().splitlines()
    # a slim bundle (tools/bundle.py --slim-release) left the same members out of both trees: absent, not compared
    drop = manifest.get("release_slim_dropped", ())
    bad, proven, absent = [], 0, 0
    for line in record:
        path, digest = line.split(",")[:2]
        if not path.startswith("sglang/") or not digest:
            continue
        if any(fnmatch.fnmatch(path, pat) for pat in drop):
            absent += 1
            if (pristine / path).exists():
                bad.append(path)
            continue
        got = base64.urlsafe_b64encode(hashlib.sha256((pristine / path).read_bytes()).digest()).rstrip(b"=").decode()
        if "sha256=" + got != digest:
            bad.append(path)
        proven += 1
    if bad:
        raise SystemExit(f"the rebuilt release tree differs from the release's RECORD: {bad[:5]}")
    return {"stubs": _stubs(work), "bundle_total": manifest["total"],
            "pristine_proven_files": proven, "pristine_dropped_files": absent}


# import-only stand-ins for what the server imports at module level but the checks never use, written when
# neither the machine nor the bundle has the package: sglang/utils.py imports IPython.display (for notebooks;
# IPython and its dependencies are 7.5 MiB); the OpenAI streaming-ASR and realtime routes import soundfile
# (audio inputs; the pin and every release since), which a bundle at its budget may leave out (bundle.STUBBABLE:
# v0.5.16's), and from v0.5.16 the function-call parser imports xgrammar (below).  What a release's start
# imports that neither the machine nor a bundle has: tools/imports.py (docs/bundle.md)
STUBS = {
    "IPython": {"IPython/__init__.py": "", "IPython/display.py": "class HTML(str):\n    pass\n\n\ndef display(*a, **k):\n    pass\n"},
    "soundfile": {"soundfile.py": "# stand-in (tools/gpu/e2e_install.py STUBS): audio inputs are not available\n"},
    # from v0.5.16 sglang/srt/function_call/inkling_detector.py imports xgrammar.StructuralTag at module level
    # (the grammar backend itself imports xgrammar only when a request asks for structured output)
    # (a pydantic field type there: the stand-in is a model that accepts any fields); from v0.5.17
    # kimik3_structural_tag.py also imports fifteen Format classes from xgrammar.structural_tag, each
    # such a model here (a module __getattr__, so the list is not copied)
    "xgrammar": {"xgrammar/__init__.py": "from xgrammar.structural_tag import StructuralTag  # noqa: F401\n",
                 "xgrammar/structural_tag.py":
                     "# stand-in (tools/gpu/e2e_install.py STUBS): structured output is not available\n"
                     "import pydantic\n\n\n"
                     "class StructuralTag(pydantic.BaseModel):\n"
                     "    model_config = pydantic.ConfigDict(extra='allow')\n\n\n"
                     "def __getattr__(name):\n"
                     "    if name.startswith('__'):\n"
                     "        raise AttributeError(name)\n"
                     "    model = type(name, (StructuralTag,), {'__module__': __name__})\n"
                     "    globals()[name] = model\n"
                     "    return model\n"},
}


def _stubs(work):
    """The STUBS written for this machine and bundle (reported as "stubs")."""
    written = []
    for name, files in STUBS.items():
        if importlib.util.find_spec(name) is not None or any((work / "deps").glob(f"{name}*")):
            continue
        for rel, text in files.items():
            (work / "stubs" / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / "stubs" / rel).write_text(text)
        written.append(name)
    return written

