"""--wheel --python: the patched wheel from the release's own wheel for
another Python (the GPU machine's 3.12), its sha256 checked against
upstream.lock's [artifact.wheels] or recorded on first use, its tree proven
equal to the pin's before the stack is laid on it."""
import base64
import csv
import hashlib
import io
import os
import zipfile

import tomlkit

from sgl_overlay import artifacts, lock as lockmod
from sgl_overlay.project import CACHE_ENV
from tests.apply.support import POOL, ROOT

# the pin's cp312 wheel (the GPU machine's Python), as the lock names it
CP312 = artifacts.wheel_filename(lockmod.load(ROOT / "upstream.lock"), "3.12")


def _wheel_files(path):
    """{name: bytes} of a wheel, and whether every RECORD line matches."""
    with zipfile.ZipFile(path) as z:
        files = {i.filename: z.read(i) for i in z.infolist() if not i.is_dir()}
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    bad = []
    for name, digest, size in csv.reader(io.StringIO(files[record].decode())):
        if not digest:
            continue
        algo, _, value = digest.partition("=")
        data = files[name]
        mine = base64.urlsafe_b64encode(hashlib.new(algo, data).digest()).rstrip(b"=").decode()
        if mine != value or int(size) != len(data):
            bad.append(name)
    return files, bad


def _lock_without_cp312(text):
    doc = tomlkit.parse(text)
    del doc["artifact"]["wheels"][CP312]
    return tomlkit.dumps(doc)


def _private_cache(tmp_path, lock):
    """A cache holding only a hard link to the shared cache's cp312 wheel (fetched through pip once):
    a test that makes the tool discard it discards the link, never the shared copy."""
    shared = artifacts.lock_wheel(lock, CP312).path
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    os.link(shared, cache / "artifacts" / CP312)
    return cache


def test_python_312_wheel_is_the_release_cp312_wheel_with_the_stack(project, patches, lock, tmp_path):
    text, _ = patches.make([(POOL, 'msg = "Not enough memory.', 'msg = "Not enough memory (cp312).')])
    project.series(["p.patch"], {"p.patch": text})
    out = tmp_path / "dist"
    r = project.apply("--wheel", str(out), "--python", "3.12", "--json")
    assert r.returncode == 0, r.stderr
    w = r.data["wheel"]
    assert [x["path"] for x in r.data["wheels"]] == [w["path"]]
    assert w["artifact_sha256"] == lock.wheels[CP312]      # the lock's record, checked
    assert w["sha256_status"] == "verified"
    assert w["tree_normalized"] == lock.tree_normalized   # proven equal to the pin's tree
    assert w["path"].endswith("-cp312-cp312-manylinux_2_34_x86_64.whl")
    files, bad = _wheel_files(w["path"])
    assert bad == []
    assert b"Not enough memory (cp312)." in files["sglang/srt/model_executor/pool_configurator.py"]
    so = sorted(n for n in files if n.endswith(".so"))
    assert so and all("cpython-312" in n for n in so if "cpython-" in n), so   # the cp312 release's compiled modules
    assert any("cpython-312" in n for n in so)
    assert "trust on first use" not in r.stderr + r.stdout


def test_first_use_records_the_sha256_in_the_lock(project, lock, tmp_path):
    lock_path = project.root / "upstream.lock"
    lock_path.write_text(_lock_without_cp312(lock_path.read_text()))
    assert CP312 not in lockmod.load(lock_path).wheels
    r = project.apply("--wheel", str(tmp_path / "dist"), "--python", "cp312", "--json")
    assert r.returncode == 0, r.stderr
    assert r.data["wheel"]["sha256_status"] == "recorded"
    recorded = lockmod.load(lock_path).wheels
    assert recorded == {CP312: artifacts.sha256_file(artifacts.lock_wheel(lock, CP312).path)}
    assert recorded[CP312] == lock.wheels[CP312]          # the same file the project's own lock records


def test_a_wheel_that_differs_from_the_record_is_refused_and_discarded(project, lock, tmp_path, monkeypatch):
    lock_path = project.root / "upstream.lock"
    doc = tomlkit.parse(lock_path.read_text())
    doc["artifact"]["wheels"][CP312] = "0" * 64
    lock_path.write_text(tomlkit.dumps(doc))
    before = lock_path.read_text()
    cache = _private_cache(tmp_path, lock)
    monkeypatch.setenv(CACHE_ENV, str(cache))
    out = tmp_path / "dist"
    r = project.apply("--wheel", str(out), "--python", "3.12", check_json=False)
    assert r.returncode == 3, r.stderr
    assert CP312 in r.stderr and "sha256" in r.stderr
    assert not (cache / "artifacts" / CP312).exists()      # discarded
    assert lock_path.read_text() == before                 # the record is never overwritten
    assert not out.exists() or list(out.iterdir()) == []


def test_python_needs_wheel_and_a_cpython_version(project, tmp_path):
    r = project.apply("--python", "3.12", check_json=False)
    assert r.returncode == 2 and "--python needs --wheel" in r.stderr
    assert not project.out.exists()                        # refused before any work
    r = project.apply("--wheel", str(tmp_path / "d"), "--python", "pypy3.10", check_json=False)
    assert r.returncode == 2 and "is not a CPython version" in r.stderr
