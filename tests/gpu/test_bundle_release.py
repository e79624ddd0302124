"""A pristine bundle of another release (tools/bundle.py --release; docs/bundle.md, "Another release"):
the releases' own METADATA (cached wheels) decides whether it can run on the GPU machine and at
which versions its runtime wheels are fetched; e2e installs such a bundle as the pristine tree."""
import json
import os
import subprocess
import sys

import pytest

from sgl_overlay import archive, artifacts, bundle
from sgl_overlay.bundle import MIB
from sgl_overlay.errors import OverlayError
from tests.gpu.e2e_script import e2e, e2e_install
from tests.gpu.release_bundle import TAGS, pristine_bundle

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def metadata(version):
    return archive.release_metadata(artifacts.release(version, tags=TAGS).path)


def test_v0_5_18_requires_another_torch_than_the_h200s():
    # sglang-0.5.18's METADATA: "Requires-Dist: torch==2.13.0"; the H200 machine runs 2.11.0+cu130
    assert bundle.release_blockers(metadata("0.5.18"), TAGS, bundle.MACHINE) == [
        {"name": "torch", "requires": "torch==2.13.0", "machine": "2.11.0"}]


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.17"])
def test_releases_on_torch_2_11_have_no_blocker(version):
    assert bundle.release_blockers(metadata(version), TAGS, bundle.MACHINE) == []


def test_a_machine_with_the_releases_torch_has_no_blocker():
    assert bundle.release_blockers(metadata("0.5.18"), TAGS, {"torch": "2.13.0", "triton": "3.7.1"}) == []


def test_runtime_wheels_at_the_releases_own_pins(pinned_lock):
    from sgl_overlay import versions

    r18 = bundle.runtime_requirements(versions.pins(metadata("0.5.18"), TAGS))
    for want in ("sglang-kernel==0.4.6.post1", "flashinfer-python==0.6.17", "transformers==5.12.1",
                 "apache-tvm-ffi==0.1.11", "openai==2.6.1", "tokenizers==0.22.2"):
        assert want in r18
    pin = bundle.runtime_requirements(pinned_lock.dependencies)     # v0.5.17's own pyproject pins
    for want in ("sglang-kernel==0.4.5", "flashinfer-python==0.6.15.post1", "transformers==5.12.1",
                 "apache-tvm-ffi==0.1.11", "tokenizers==0.22.2"):
        assert want in pin
    assert len(r18) == len(pin) == len(bundle.RUNTIME)


def test_metadata_is_the_wheels_own_and_its_absence_names_the_file(tmp_path):
    import zipfile
    from sgl_overlay.errors import UsageError
    wheel = artifacts.release("0.5.12.post1", tags=TAGS).path
    assert "\nName: sglang\nVersion: 0.5.12.post1\n" in metadata("0.5.12.post1")
    broken = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith(".dist-info/METADATA"):
                dst.writestr(info, src.read(info))
    with pytest.raises(UsageError, match=f"{wheel.name} has no .dist-info/METADATA") as e:
        archive.release_metadata(broken)
    assert str(broken) in e.value.hint


def test_a_release_that_does_not_pin_the_kernel_is_an_error():
    with pytest.raises(OverlayError, match="does not pin sglang-kernel"):
        bundle.runtime_requirements({"transformers": "5.6.0", "flashinfer_python": "0.6.11.post1"})


def _cli(*args):
    return subprocess.run([sys.executable, "tools/bundle.py", *args], cwd=ROOT, capture_output=True, text=True)


def test_cli_refuses_v0_5_18_and_writes_nothing(tmp_path):
    out, dl = tmp_path / "out", tmp_path / "dl"
    p = _cli("--release", "0.5.18", "--python", "3.11", "--out", str(out), "--downloads", str(dl), "--json", "-q")
    assert p.returncode == 1, p.stderr
    d = json.loads(p.stdout)
    assert d["blockers"] == [{"name": "torch", "requires": "torch==2.13.0", "machine": "2.11.0"}]
    assert "torch==2.13.0" in d["error"] and "torch 2.11.0" in d["error"] and "--machine" in d["hint"]
    assert not out.exists() and not dl.exists()


def test_cli_machine_must_be_name_equals_version(tmp_path):
    p = _cli("--release", "0.5.18", "--python", "3.11", "--machine", "torch", "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "--machine 'torch' is not NAME==VERSION" in p.stderr


def test_e2e_installs_the_releases_own_wheel_as_the_pristine_tree(tmp_path):
    b = pristine_bundle(tmp_path, "0.5.18")
    work = tmp_path / "work"
    r = e2e_install.install(b, work)
    assert r["pristine_only"] and r["release"] == "0.5.18"
    assert "0.5.18" in (work / "pristine" / "sglang" / "_version.py").read_text()
    assert (work / "pristine" / "sglang-0.5.18.dist-info" / "RECORD").exists()
    assert (work / "pristine" / "sglang" / "srt" / "server_args.py").exists()
    assert not (work / "patched").exists()


def test_e2e_refuses_the_patched_tree_of_apristine_bundle(tmp_path):
    b = pristine_bundle(tmp_path, "0.5.18")
    with pytest.raises(SystemExit, match="pristine bundle of sglang 0.5.18.*--trees pristine"):
        e2e.main(["--bundle", str(b), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"), "--cases", "dense"])
    assert not (tmp_path / "w").exists()


# --slim-release (bundle.RELEASE_SLIM_DROP): the release's wheel without the diffusion runtime and the gRPC
# module, which the server's start never imports (tests/gpu/test_start_imports.py walks it)

def _members(z):
    return {i.filename: i for i in z.infolist() if not i.is_dir()}


@pytest.mark.parametrize("version", ["0.5.13.post1", "0.5.14", "0.5.16"])
def test_slim_release_wheel_lacks_exactly_the_dropped_members(tmp_path, version):
    import base64
    import csv
    import hashlib
    import io
    import zipfile

    wheel = artifacts.release(version, tags=TAGS).path
    slim = bundle.slim_wheel(wheel, tmp_path, bundle.RELEASE_SLIM_DROP)
    assert slim.name == f"sglang-{version}+slim-{TAGS}.whl"
    old_info, new_info = f"sglang-{version}.dist-info/", f"sglang-{version}+slim.dist-info/"
    with zipfile.ZipFile(wheel) as r, zipfile.ZipFile(slim) as s:
        before, after = _members(r), _members(s)
        dropped = {n for n in before if n.startswith(("sglang/multimodal_gen/", "sglang/srt/grpc/"))}
        assert "sglang/srt/grpc/_core.cpython-311-x86_64-linux-gnu.so" in dropped
        assert "sglang/multimodal_gen/__init__.py" in dropped and len(dropped) > 600
        renamed = {(new_info + n[len(old_info):] if n.startswith(old_info) else n) for n in set(before) - dropped}
        assert set(after) == renamed
        # every kept member byte for byte, but the METADATA's version and the RECORD
        for n in set(before) - dropped:
            if n.startswith(old_info):
                continue
            assert s.read(n) == r.read(n), n
        meta = s.read(new_info + "METADATA").decode()
        assert f"\nVersion: {version}+slim\n" in meta
        assert meta.replace(f"Version: {version}+slim", f"Version: {version}") == r.read(old_info + "METADATA").decode()
        # the RECORD lists every member once, with its own sha256 and size (the RECORD itself without)
        rows = list(csv.reader(io.StringIO(s.read(new_info + "RECORD").decode())))
        assert sorted(row[0] for row in rows) == sorted(after)
        for path, digest, size in rows:
            if path == new_info + "RECORD":
                assert digest == size == ""
                continue
            data = s.read(path)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
    assert slim.stat().st_size < wheel.stat().st_size - MIB


def test_cli_slim_release_without_release_is_a_usage_error(tmp_path):
    out, dl = tmp_path / "out", tmp_path / "dl"
    p = _cli("--slim-release", "--python", "3.11", "--out", str(out), "--downloads", str(dl), "--json", "-q")
    assert p.returncode == 2, p.stderr
    d = json.loads(p.stdout)
    assert d["error"] == "--slim-release slims another release's wheel: it needs --release VERSION"
    assert "never slimmed" in d["hint"] and d["exit_code"] == 2
    assert "error: --slim-release" in p.stderr
    assert not out.exists() and not dl.exists() and not (tmp_path / "out.wheel").exists()
