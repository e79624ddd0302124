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


@pytest.mark.parametrize("version", ["0.5.12.post1", "0.5.17"])    # the releases the H200 ran (12-01, 12-03)
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


def test_metadata_is_the_wheels_own_and_its_absence_names_the_file(tmp_path, pinned_lock):
    import zipfile
    from sgl_overlay.errors import UsageError
    version = pinned_lock.version
    wheel = artifacts.release(version, tags=TAGS).path
    assert f"\nName: sglang\nVersion: {version}\n" in metadata(version)
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


@pytest.mark.parametrize("version", ["0.5.13.post1", "0.5.14", "0.5.16", "0.5.17"])
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
        dropped = {n for n in before if n.startswith(("sglang/multimodal_gen/", "sglang/srt/grpc/",
                                                      "sglang/srt/server/_core.", "sglang/srt/multimodal/_core."))}
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


PY = "%d.%d" % sys.version_info[:2]


# the pin's own bundle with --slim-release (v0.5.17's does not fit 64 MiB without it): the patched wheel
# slimmed alike, the delta taken between the release and it, the release's tree rebuilt and proven on install

@pytest.fixture(scope="module")
def pin_wheels(tmp_path_factory):
    """The pin's patched wheel for this Python (tools/apply.py --wheel --python, so e2e_install can install it
    here) and the release's wheel for it."""
    from sgl_overlay import lock as lockmod
    tmp = tmp_path_factory.mktemp("pin-wheel")
    p = subprocess.run([sys.executable, "tools/apply.py", "--out", str(tmp / "tree"), "--wheel", str(tmp / "dist"),
                        "--python", PY, "--json", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lock = lockmod.load(os.path.join(ROOT, "upstream.lock"))
    release = artifacts.lock_wheel(lock, artifacts.wheel_filename(lock, PY)).path
    return lock, next((tmp / "dist").glob("*.whl")), release


def _fake_runtime(dl):
    """A stand-in wheel for every bundle.RUNTIME name in ``dl`` (so nothing is downloaded), sglang-kernel's
    and flashinfer's with members that their slim copies drop."""
    from wheel.wheelfile import WheelFile
    dl.mkdir()
    for name, _, _ in bundle.RUNTIME:
        mod = name.replace("-", "_")
        with WheelFile(dl / f"{mod}-1.0-py3-none-any.whl", "w") as w:
            w.writestr(f"{mod}_top/__init__.py", "")
            w.writestr(f"{mod}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
            w.writestr(f"{mod}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                     "Tag: py3-none-any\n")
            if name == "flashinfer-python":
                w.writestr("flashinfer/data/cutlass/include/cutlass.h", os.urandom(MIB))
            if name == "sglang-kernel":
                w.writestr("sgl_kernel/flash_ops.abi3.so", os.urandom(2 * MIB))


def test_the_pins_slim_bundle_rebuilds_and_proves_the_releases_tree(pin_wheels, tmp_path):
    import zipfile
    lock, patched, release = pin_wheels
    _fake_runtime(tmp_path / "dl")
    out = tmp_path / "bundle"
    d = bundle.build(lock, patched, release, out, PY, "manylinux_2_34_x86_64", {"attention-backend": "triton"},
                     64 * MIB, tmp_path / "dl", slim_release=True)
    assert d["fits"] and d["release_slim_dropped"] == list(bundle.RELEASE_SLIM_DROP)
    version = patched.name.split("-")[1]
    assert version.startswith(lock.version + "+overlay.")
    assert d["patched_wheel"] == patched.name.replace(version, version + ".slim")
    assert len(d["chosen"]) == len(bundle.RUNTIME) and d["total"] <= 64 * MIB
    with zipfile.ZipFile(release) as r, zipfile.ZipFile(out / d["patched_wheel"]) as s:
        gone = [n for n in r.namelist() if not n.endswith("/") and bundle.dropped(n, bundle.RELEASE_SLIM_DROP)]
        kept = set(s.namelist())
        assert f"sglang/srt/server/_core.cpython-{PY.replace('.', '')}-x86_64-linux-gnu.so" in gone
        assert f"sglang/srt/multimodal/_core.cpython-{PY.replace('.', '')}-x86_64-linux-gnu.so" in gone
        assert not kept & set(gone)
    assert (out / d["patched_wheel"]).stat().st_size < patched.stat().st_size - 10 * MIB
    assert d["release_delta"]["removed"] == 0          # the dropped members are left out of both sides
    r = e2e_install.install(out, tmp_path / "work")
    assert r["pristine_dropped_files"] == len(gone)
    record = zipfile.ZipFile(release).read(f"sglang-{lock.version}.dist-info/RECORD").decode()
    listed = [ln for ln in record.splitlines() if ln.startswith("sglang/") and ln.split(",")[1]]
    assert r["pristine_proven_files"] == len(listed) - len(gone) > 2000
    for n in gone:
        assert not (tmp_path / "work" / "pristine" / n).exists() and not (tmp_path / "work" / "patched" / n).exists()


def test_a_slim_bundle_whose_pristine_tree_holds_a_dropped_member_is_refused(pin_wheels, tmp_path):
    """A delta taken without the drop puts the release's dropped members back: the install, told they were
    dropped, names one instead of calling the tree proven."""
    lock, patched, release = pin_wheels
    _fake_runtime(tmp_path / "dl")
    out = tmp_path / "bundle"
    d = bundle.build(lock, patched, release, out, PY, "manylinux_2_34_x86_64", {"attention-backend": "triton"},
                     64 * MIB, tmp_path / "dl", slim_release=True)
    bundle.release_delta(release, out / d["patched_wheel"], out / d["release_delta"]["file"])
    with pytest.raises(SystemExit, match="differs from the release's RECORD: .*sglang/(multimodal_gen|srt/grpc|srt/server|"
                                         "srt/multimodal)"):
        e2e_install.install(out, tmp_path / "work")


def test_flashinfer_slim_drops_cutlass_only(tmp_path, pinned_lock):
    _fake_runtime(tmp_path / "dl")
    cands, files = bundle._candidates(pinned_lock.dependencies, tmp_path / "dl", "3.12", "manylinux_2_34_x86_64", print)
    fi = next(c for c in cands if c.name == "flashinfer-python")
    assert [v.label for v in fi.variants] == ["full", "slim"]
    assert fi.variants[1].requires == (("attention-backend", "triton"),) and "CUTLASS" in fi.variants[1].disables
    import zipfile
    full, slim = (set(zipfile.ZipFile(files[("flashinfer-python", v)]).namelist()) for v in ("full", "slim"))
    assert {n for n in full - slim if not n.endswith("RECORD") and ".dist-info/" not in n} == {
        "flashinfer/data/cutlass/include/cutlass.h"}


def test_cli_slim_release_names_both_wheels_in_its_help():
    p = _cli("--help")
    assert p.returncode == 0 and "the patched one, or with --release the release's" in " ".join(p.stdout.split())
