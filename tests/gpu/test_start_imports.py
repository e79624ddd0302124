"""tools/imports.py (sgl_overlay.start_imports): the module-level imports a server's start reaches,
read from the real release wheels (cached), against what the GPU machine (tests/gpu/data/
h200-packages.txt, its installed distributions) and a bundle provide.  The importers expected here
were read in the releases' sources; the machine's list is the H200's."""
import ast
import json
import os
import subprocess
import sys

import pytest
from wheel.wheelfile import WheelFile

from sgl_overlay import artifacts, bundle, start_imports
from tests.gpu.e2e_script import e2e_install
from tests.gpu.release_bundle import TAGS, pristine_bundle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "gpu", "data")
H200 = os.path.join(DATA, "h200-packages.txt")
ROOTS = ["sglang.launch_server", "sglang.srt.entrypoints.http_server"]


def _cli(*args):
    p = subprocess.run([sys.executable, "tools/imports.py", *args, "-q"], cwd=ROOT, capture_output=True, text=True)
    return p.returncode, (json.loads(p.stdout) if "--json" in args and p.stdout else p.stdout), p.stderr


def _machine(tmp_path, *names, runtime_but=()):
    """A --machine-packages file: the H200's list, ``names``, and the RUNTIME wheels but ``runtime_but``
    (what a bundle at its budget carries), as `pip list --format freeze` lines."""
    lines = open(H200).read().splitlines() + [f"{n}==1" for n in names]
    lines += [f"{n}==1" for n, _, _ in bundle.RUNTIME if n not in runtime_but]
    f = tmp_path / "machine.txt"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_v0_5_16_without_xgrammar_and_soundfile_names_them_with_their_importers(tmp_path):
    b = pristine_bundle(tmp_path, "0.5.16")
    rc, d, err = _cli("--bundle", str(b), "--json")
    assert rc == 1, err
    # sglang/srt/function_call/inkling_detector.py:9 `from xgrammar import StructuralTag`; protocol.py:57-60
    # imports it in a bare try/except (not needed), base_format_detector.py:10-14 under except ImportError
    assert [w["at"] for w in d["missing"]["xgrammar"]] == ["sglang.srt.function_call.inkling_detector:9"]
    assert [w["at"] for w in d["missing"]["soundfile"]] == ["sglang.srt.entrypoints.openai.realtime.session:21",
                                                            "sglang.srt.entrypoints.openai.streaming_asr:8"]
    assert [w["at"] for w in d["missing"]["IPython"]] == ["sglang.utils:26"]
    # other platforms' modules are imported only under a module-level `if`
    assert "torch_npu" in d["missing_conditional"] and "torch_npu" not in d["missing"]
    assert {"at": "sglang.srt.utils.hf_transformers.common:72", "if": "get_bool_env_var('SGLANG_USE_MODELSCOPE')",
            "module_conditional": False} in d["missing_conditional"]["modelscope"]


def test_on_the_h200_with_the_v0_5_16_bundle_what_is_missing_is_what_e2e_stands_in_for(tmp_path):
    """The H200's packages and the bundle's RUNTIME wheels without soundfile (left out at 60.5 MiB): the
    start lacks IPython, soundfile and xgrammar, the three e2e_install.STUBS stands in for; with them on the
    machine nothing is missing."""
    b = pristine_bundle(tmp_path, "0.5.16")
    rc, d, err = _cli("--bundle", str(b), "--machine-packages", str(_machine(tmp_path, runtime_but=("soundfile",))),
                      "--json")
    assert rc == 1, err
    assert sorted(d["missing"]) == ["IPython", "soundfile", "xgrammar"] == sorted(e2e_install.STUBS)
    rc, out, err = _cli("--bundle", str(b), "--machine-packages",
                        str(_machine(tmp_path, "ipython", "xgrammar", runtime_but=())))
    assert rc == 0, out + err
    assert out.splitlines()[-1] == "nothing that every start imports is missing"
    assert "missing, imported by every start" not in out


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.13.post1", "0.5.14"])
def test_earlier_releases_import_soundfile_too_and_no_xgrammar(tmp_path, version):
    """v0.5.12.post1 (the pin before v0.5.17) and v0.5.13.post1..v0.5.14 import soundfile at start as
    well (sglang/srt/entrypoints/openai/streaming_asr.py), never xgrammar: their bundles, which carried soundfile within 60.5 MiB, needed the
    IPython stand-in alone; without soundfile they need its one too."""
    b = pristine_bundle(tmp_path, version)
    rc, d, err = _cli("--bundle", str(b), "--machine-packages", str(_machine(tmp_path)), "--json")
    assert rc == 1, err
    assert sorted(d["missing"]) == ["IPython"]
    rc, d, err = _cli("--bundle", str(b), "--machine-packages", str(_machine(tmp_path, runtime_but=("soundfile",))),
                      "--json")
    assert sorted(d["missing"]) == ["IPython", "soundfile"]
    assert "sglang.srt.entrypoints.openai.streaming_asr" in {w["at"].split(":")[0] for w in d["missing"]["soundfile"]}


def test_a_bundled_wheel_provides_its_top_level_modules(tmp_path):
    """soundfile's wheel installs soundfile.py, _soundfile.py and _soundfile_data/ (its RECORD): in the
    bundle, it is no longer missing."""
    w = tmp_path / "soundfile-0.13.1-py2.py3-none-any.whl"
    with WheelFile(w, "w") as z:
        z.writestr("soundfile.py", "")
        z.writestr("_soundfile.py", "")
        z.writestr("_soundfile_data/__init__.py", "")
        z.writestr("soundfile-0.13.1.dist-info/METADATA", "Name: soundfile\nVersion: 0.13.1\n")
    assert start_imports.wheel_tops(w) == {"soundfile", "_soundfile", "_soundfile_data"}
    rc, d, err = _cli("--bundle", str(pristine_bundle(tmp_path, "0.5.16", w)), "--json")
    assert "soundfile" not in d["missing"] and "xgrammar" in d["missing"]
    assert d["bundle_wheels"] == [w.name]


def test_the_slim_release_drops_nothing_the_start_imports(tmp_path, version="0.5.16"):
    """--slim-release drops sglang/multimodal_gen and sglang/srt/grpc: no module the start imports at
    module level, conditionally or not, is among them; the walk reaches the same modules."""
    wheel = artifacts.release(version, tags=TAGS).path
    slim = bundle.slim_wheel(wheel, tmp_path, bundle.RELEASE_SLIM_DROP)
    full, thin = (start_imports.walk(start_imports.Tree(w), ROOTS) for w in (wheel, slim))
    assert thin.internal_missing == {} and thin.unparsed == {}
    assert (thin.modules, thin.always) == (full.modules, full.always)
    dropped = {m for m in start_imports.Tree(wheel).modules if m.startswith(("sglang.multimodal_gen", "sglang.srt.grpc"))}
    assert len(dropped) > 100 and not dropped & set(start_imports.Tree(slim).modules)


def test_module_level_rules():
    src = '''
import a
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import b
else:
    import c
try:
    import d
except ImportError:
    import e
try:
    import f
except (ValueError, ModuleNotFoundError):
    pass
try:
    import g
except KeyError:
    pass
def h():
    import i
class J:
    import k
if __name__ == "__main__":
    import m
if FLAG:
    import n
from . import o
from ..p import q
'''
    got = [(w, c) for _, w, _, c in start_imports.module_level_imports(ast.parse(src))]
    assert got == [("a", None), ("typing", None), ("c", "not (TYPE_CHECKING)"), ("e", None), ("g", None),
                   ("k", None), ("n", "FLAG"), (".", None), ("..p", None)]
    as_main = [w for _, w, _, _ in start_imports.module_level_imports(ast.parse(src), is_root=True)]
    assert "m" in as_main
    assert start_imports._absolute("x.y.z", False, "..p") == "x.p"
    assert start_imports._absolute("x.y", True, ".o") == "x.y.o"


def test_machine_packages_freeze_or_names():
    text = "# comment\nPyYAML==6.0.2\nzstandard @ file:///tmp/z.whl\n-e git+https://x#egg=y\nnumpy, torch\nopencv_python_headless\n"
    assert start_imports.parse_packages(text) == {"pyyaml", "zstandard", "numpy", "torch", "opencv-python-headless"}
    always, _ = start_imports.missing({"yaml": [{"at": "m:1", "if": None, "module_conditional": False}],
                                      "cv2": [{"at": "m:2", "if": None, "module_conditional": False}],
                                      "distutils": [{"at": "m:3", "if": None, "module_conditional": False}]},
                                      (3, 12), start_imports.parse_packages(text), set())
    assert always == {"distutils": [{"at": "m:3", "if": None, "module_conditional": False}]}  # gone in 3.12


def test_usage_errors(tmp_path):
    rc, _, err = _cli()
    assert rc == 2 and "give --bundle DIR" in err
    rc, _, err = _cli("--tree", str(tmp_path / "nothing"))
    assert rc == 2 and f"--tree {tmp_path / 'nothing'} does not exist" in err
    rc, _, err = _cli("--bundle", str(tmp_path))
    assert rc == 2 and f"{tmp_path} has no bundle.json" in err
    rc, _, err = _cli("--tree", str(artifacts.release("0.5.16", tags=TAGS).path), "--root", "sglang.nope")
    assert rc == 2 and "has no module sglang.nope" in err
    (tmp_path / "bad.txt").write_text("torch==2.11.0\nnumpy==\n")
    rc, _, err = _cli("--tree", str(tmp_path), "--machine-packages", str(tmp_path / "bad.txt"))
    assert rc == 2 and "the machine's package list has 'numpy==', which is not NAME==VERSION" in err
    rc, _, err = _cli("--tree", str(tmp_path), "--python", "2.7")
    assert rc == 2 and "--python '2.7' is not a CPython 3 version" in err


def test_an_unpacked_wheel_walks_as_the_wheel(tmp_path, pinned_lock):
    """--tree takes a folder holding sglang/ (an unpacked wheel, a pip --target) as well as the wheel
    (the pin's; the IPython import's line read from its own sglang/utils.py)."""
    import re
    import zipfile
    wheel = artifacts.release(pinned_lock.version, tags=TAGS).path
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "tree")
        utils = z.read("sglang/utils.py").decode().splitlines()
    ipython = [f"sglang.utils:{n}" for n, line in enumerate(utils, 1) if re.match(r"(from|import) IPython\b", line)]
    (tmp_path / "tree" / "sglang" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "tree" / "sglang" / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"")
    a, b = (start_imports.walk(start_imports.Tree(p), ROOTS) for p in (wheel, tmp_path / "tree"))
    assert a == b and a.modules > 500
    assert len(ipython) == 1 and [w["at"] for w in a.external["IPython"]] == ipython
