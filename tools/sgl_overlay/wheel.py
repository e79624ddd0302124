"""The installable patched wheel: the pinned release wheel (compiled
modules, metadata and dependency pins included) with the patched and overlay
files in place, RECORD regenerated, and the version given a PEP 440 local
label ``<version>+overlay.<stack digest prefix>``.
"""
import base64
import csv
import io
import hashlib
import json
import os
import re
import tempfile
import zipfile
from pathlib import Path

from . import gitcmd, source
from .builder import MANIFEST
from .errors import UsageError

LABEL_LEN = 12


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


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
        if status == "D":
            deleted.add(wpath)
            continue
        ls = gitcmd.out(tree, "ls-tree", "patched", "--", path).split()
        if ls[0] == "120000":
            raise UsageError(f"{path}: the stack makes it a symlink, which a wheel cannot hold",
                             hint="make it a regular file")
        data = gitcmd.run(tree, "cat-file", "blob", ls[2], binary=True).stdout
        changed[wpath] = (data, ls[0] == "100755")
    return changed, deleted, ignored


def build_wheel(lock, tree, out_dir, cache=None, progress=None):
    say = progress or (lambda m: None)
    tree = Path(tree)
    manifest = json.loads((tree / MANIFEST).read_text())
    version = f"{lock.version}+overlay.{manifest['stack_digest'][:LABEL_LEN]}"
    artifact = source.fetch_pinned_artifact(lock, cache, progress)
    say(f"building the patched wheel {version}")
    changed, deleted, ignored = _changes(tree, lock)
    touched = sorted(changed)
    old_info = f"sglang-{lock.version}.dist-info/"
    new_info = f"sglang-{version}.dist-info/"
    name = f"sglang-{version}-{lock.wheel_tags}.whl"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    date_time = tuple(int(x) for x in lock.date.split("-")) + (0, 0, 0)
    records = []
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
    os.close(fd)
    try:
        with zipfile.ZipFile(artifact) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
            def put(info_name, data, like=None, executable=False):
                zi = zipfile.ZipInfo(info_name, date_time=like.date_time if like else date_time)
                zi.compress_type = zipfile.ZIP_DEFLATED
                mode = (like.external_attr >> 16) if like else 0
                mode = (mode or 0o100644) | (0o111 if executable else 0)
                zi.external_attr = (mode & 0xFFFF) << 16
                dst.writestr(zi, data)
                if not info_name.endswith("/RECORD"):
                    records.append((info_name, _record_hash(data), str(len(data))))

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
            records.append((f"{new_info}RECORD", "", ""))
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(records)   # paths may hold commas
            put(new_info + "RECORD", buf.getvalue().encode())
        os.replace(tmp, out_dir / name)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return {"path": str(out_dir / name), "version": version, "changed": touched,
            "deleted": sorted(deleted), "not_in_wheel": ignored}
