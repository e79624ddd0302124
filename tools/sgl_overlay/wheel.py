"""The installable patched wheel: the pinned release wheel (compiled
modules, metadata and dependency pins included) with the patched and overlay
files in place, RECORD regenerated, and the version given a PEP 440 local
label ``<version>+overlay.<stack digest prefix>``.

The wheel is written with the ``wheel`` package's ``WheelFile``, which
hashes every member as it is written and writes RECORD on close.
"""
import calendar
import contextlib
import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from wheel.wheelfile import WheelFile

from . import artifacts, gitcmd, versions
from .builder import MANIFEST
from .errors import UsageError

LABEL_LEN = 12
DELETED = "D"            # git diff --name-status: the path is gone in the second tree


@contextlib.contextmanager
def _source_date_epoch(date_time):
    """WheelFile dates the RECORD it writes by SOURCE_DATE_EPOCH (the
    reproducible-builds convention): the lock's date, so builds repeat."""
    old = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(calendar.timegm(date_time))
    try:
        yield
    finally:
        if old is None:
            del os.environ["SOURCE_DATE_EPOCH"]
        else:
            os.environ["SOURCE_DATE_EPOCH"] = old


def _changes(tree, lock):
    """(changed {wheel path: (data, executable)}, deleted {wheel path},
    ignored [tree paths outside the package])."""
    z = gitcmd.run(tree, "diff", "--name-status", "--no-renames", "-z", "upstream", "patched", "--",
                   binary=True).stdout.split(b"\0")
    pairs = [(z[i].decode(), z[i + 1].decode()) for i in range(0, len(z) - 1, 2)]
    prefix = lock.subdir + "/"
    changed, deleted, ignored = {}, set(), []
    for status, path in pairs:
        if not path.startswith(prefix):
            ignored.append(path)
            continue
        wpath = lock.artifact_root + "/" + path[len(prefix):]
        if status == DELETED:
            deleted.add(wpath)
            continue
        ls = gitcmd.out(tree, "ls-tree", "patched", "--", path).split()
        if ls[0] == "120000":
            raise UsageError(f"{path}: the stack makes it a symlink, which a wheel cannot hold",
                             hint="make it a regular file")
        data = gitcmd.run(tree, "cat-file", "blob", ls[2], binary=True).stdout
        changed[wpath] = (data, ls[0] == "100755")
    return changed, deleted, ignored


def build_wheel(lock, tree, out_dir, cache=None, progress=None, artifact=None):
    """``artifact``: another of the release's wheels (another Python's),
    already proven by ``base_tree.prove_artifact``; default the pinned one."""
    say = progress or (lambda m: None)
    tree = Path(tree)
    manifest = json.loads((tree / MANIFEST).read_text())
    version = f"{lock.version}+overlay.{manifest['stack_digest'][:LABEL_LEN]}"
    artifact = Path(artifact) if artifact else artifacts.pinned(lock, cache, progress).path
    tags = versions.wheel(artifact.name)[2]
    say(f"building the patched wheel {version}")
    changed, deleted, ignored = _changes(tree, lock)
    touched = sorted(changed)
    old_info = f"sglang-{lock.version}.dist-info/"
    new_info = f"sglang-{version}.dist-info/"
    name = f"sglang-{version}-{tags}.whl"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    date_time = tuple(int(x) for x in lock.date.split("-")) + (0, 0, 0)
    tmp_dir = tempfile.mkdtemp(dir=out_dir, prefix=f".{name}.")
    tmp = os.path.join(tmp_dir, name)      # WheelFile reads name and version from the file name
    try:
        with zipfile.ZipFile(artifact) as src, _source_date_epoch(date_time), WheelFile(tmp, "w") as dst:
            assert dst.dist_info_path + "/" == new_info, (dst.dist_info_path, new_info)

            def put(info_name, data, like=None, executable=False):
                zi = zipfile.ZipInfo(info_name, date_time=like.date_time if like else date_time)
                zi.compress_type = zipfile.ZIP_DEFLATED
                mode = (like.external_attr >> 16) if like else 0
                mode = (mode or 0o100644) | (0o111 if executable else 0)
                zi.external_attr = (mode & 0xFFFF) << 16
                dst.writestr(zi, data)        # hashed into RECORD by WheelFile

            for info in src.infolist():
                n = info.filename
                if info.is_dir() or n in deleted:
                    continue
                if n.startswith(old_info):
                    rest = n[len(old_info):]
                    if rest == "RECORD":
                        continue
                    data = src.read(info)
                    if rest == "METADATA":
                        data, k = re.subn(rb"(?m)^Version: .*$", b"Version: " + version.encode(), data, count=1)
                        if not k:
                            raise UsageError(f"{artifact.name}: METADATA has no Version line",
                                             hint="the pinned wheel is malformed")
                    put(new_info + rest, data, like=info)
                elif n in changed:
                    data, executable = changed.pop(n)
                    put(n, data, like=info, executable=executable)
                elif n == f"{lock.artifact_root}/_version.py":
                    data = src.read(info).replace(f"'{lock.version}'".encode(), f"'{version}'".encode(), 1)
                    put(n, data, like=info)
                else:
                    put(n, src.read(info), like=info)
            for n in sorted(changed):          # files the stack adds
                data, executable = changed[n]
                put(n, data, executable=executable)
        os.replace(tmp, out_dir / name)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return {"path": str(out_dir / name), "version": version, "artifact": artifact.name, "changed": touched,
            "deleted": sorted(deleted), "not_in_wheel": ignored}
