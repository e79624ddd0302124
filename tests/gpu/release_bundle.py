"""A pristine bundle folder as ``tools/bundle.py --release`` writes it, for the tests: the
release's own (cached) wheel and any other wheels, linked, with the bundle.json they read."""
import json
import os

from sgl_overlay import artifacts

TAGS = "cp311-cp311-manylinux_2_34_x86_64"      # the cached release wheels' tags


def pristine_bundle(tmp_path, version, *extra_wheels):
    wheel = artifacts.release(version, tags=TAGS).path
    b = tmp_path / "bundle"
    b.mkdir()
    for w in (wheel, *extra_wheels):
        os.symlink(w, b / w.name)
    (b / "bundle.json").write_text(json.dumps({
        "chosen": [], "release": version, "release_wheel": wheel.name, "patched_wheel": None,
        "total": sum(os.path.getsize(w) for w in (wheel, *extra_wheels))}))
    return b
