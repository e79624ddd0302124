"""upstream.lock written with tomlkit: byte-identical for unchanged data,
comments kept on update, every string escaped (the old hand-written writer
escaped only backslash and double quote)."""
import dataclasses

import pytest

from tests.apply.support import ROOT
from sgl_overlay import lock as lockmod
from sgl_overlay.errors import UsageError

COMMITTED = (ROOT / "upstream.lock").read_text(encoding="utf-8")


def same(a, b):
    return a.as_dict() | {"path": ""} == b.as_dict() | {"path": ""}


def test_render_of_the_committed_lock_is_the_committed_file(lock):
    assert lockmod.render(lock) == COMMITTED
    assert lockmod.render(lock, COMMITTED) == COMMITTED


def test_write_unchanged_is_byte_identical(lock, tmp_path):
    path = tmp_path / "upstream.lock"
    path.write_text(COMMITTED, encoding="utf-8")
    lockmod.write(lock, path)
    assert path.read_text(encoding="utf-8") == COMMITTED


def test_update_keeps_comments_and_changes_only_the_changed_lines(lock, tmp_path):
    path = tmp_path / "upstream.lock"
    text = COMMITTED.replace("[upstream]\n", "[upstream]\n# pinned for the SM120 work  (a hand-written note)\n")
    text = text.replace('torch = "2.11.0"', 'torch = "2.11.0"  # checked against the image')
    path.write_text(text, encoding="utf-8")
    new = dataclasses.replace(lock, artifact_sha256="0" * 64, dependencies={**lock.dependencies, "torch": "2.12.0"})
    lockmod.write(new, path)
    got = path.read_text(encoding="utf-8")
    assert "# pinned for the SM120 work  (a hand-written note)\n" in got
    assert 'torch = "2.12.0"  # checked against the image\n' in got
    old_lines, new_lines = text.splitlines(), got.splitlines()
    assert len(old_lines) == len(new_lines)
    assert [(a, b) for a, b in zip(old_lines, new_lines) if a != b] == [
        (f'sha256 = "{lock.artifact_sha256}"', f'sha256 = "{"0" * 64}"'),
        ('torch = "2.11.0"  # checked against the image', 'torch = "2.12.0"  # checked against the image'),
    ]
    assert same(lockmod.load(path), new)


@pytest.mark.parametrize("text", ["a\nb", "tab\there", "unicode é ☃ \U0001F600", 'q"uote', "back\\slash", "ctl\x01\x7f"])
def test_any_string_round_trips(lock, tmp_path, text):
    new = dataclasses.replace(lock, repo=f"https://example.invalid/{text}", artifact_root=text,
                              symlinks={**lock.symlinks, "a/b": text},
                              dependencies={**lock.dependencies, "flashinfer_cubin": text})
    path = tmp_path / "upstream.lock"
    lockmod.write(new, path)
    assert same(lockmod.load(path), new)


def test_dependency_names_that_need_quoting(lock, tmp_path):
    # "zope.interface = ..." would be a dotted key: a table, not a pin
    new = dataclasses.replace(lock, dependencies={**lock.dependencies, "zope.interface": "7.0", "a b": "1"})
    path = tmp_path / "upstream.lock"
    lockmod.write(new, path)
    assert same(lockmod.load(path), new)


def test_dropped_dependency_leaves_the_file(lock, tmp_path):
    deps = dict(lock.dependencies)
    del deps["torchaudio"]
    path = tmp_path / "upstream.lock"
    path.write_text(COMMITTED, encoding="utf-8")
    lockmod.write(dataclasses.replace(lock, dependencies=deps), path)
    assert "torchaudio" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("field,value,ok", [
    ("version", "0.5.12.post1", True),
    ("version", "0.5.13rc1", True),
    ("version", "0.5.13.dev2", True),
    ("version", "v0.5.12", False),
    ("version", "0.5.12-post1", False),
    ("version", "0.5.12+local", False),
    ("filename", "sglang-0.5.12.post1-py3-none.whl", False),
    ("filename", "sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.tar.gz", False),
])
def test_version_and_wheel_name_fields(lock, tmp_path, field, value, ok):
    text = COMMITTED
    if field == "version":
        text = text.replace(f'version = "{lock.version}"', f'version = "{value}"').replace(
            f"sglang-{lock.version}-", f"sglang-{value}-")
    else:
        text = text.replace(f'"{lock.artifact_filename}"', f'"{value}"')
    assert text != COMMITTED
    path = tmp_path / "upstream.lock"
    path.write_text(text, encoding="utf-8")
    if ok:
        assert lockmod.load(path).version == value
    else:
        with pytest.raises(UsageError, match=f"'(upstream.version|artifact.filename)' is malformed"):
            lockmod.load(path)


# ---- artifact.reconcile.excluded: the tag's directories the wheel does not ship --

def test_excluded_directories_are_the_outermost_without_a_shipped_file():
    tag = ["a.py", "kernels/aot/csrc/x.cu", "kernels/aot/build.sh", "kernels/ops/y.py", "srt/gone.py", "srt/z.py",
           "docs/deep/r.md", "docs/deep/s.md"]
    shipped = {"a.py", "kernels/ops/y.py", "srt/z.py"}
    # kernels/ holds a shipped file, so kernels/aot is the directory left out; a single
    # missing file beside shipped ones (srt/gone.py) is not a directory left out
    assert lockmod.excluded_directories(tag, shipped) == ("docs", "kernels/aot")
    assert lockmod.excluded_directories(tag, set(tag)) == ()


def test_a_lock_without_excluded_loads_and_gets_it_after_executable(lock, tmp_path):
    old = "".join(l for l in COMMITTED.splitlines(keepends=True)
                  if not l.startswith("excluded =") and "exclude-package-data" not in l
                  and "out of the trees proven" not in l)
    path = tmp_path / "upstream.lock"
    path.write_text(old, encoding="utf-8")
    assert lockmod.load(path).excluded == ()
    lockmod.write(lock, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    at = lines.index("excluded = " + '["kernels/aot"]')
    assert lines[at - 1] == "]" and "executable = [" in lines[at - 1 - len(lock.executable) - 1]
    assert same(lockmod.load(path), lock)


def test_the_pin_leaves_out_kernels_aot_and_an_artifact_shipping_one_is_refused(lock, tmp_path):
    """v0.5.17 moved sgl-kernel's sources under python/sglang/kernels/aot and keeps
    them out of its wheel (pyproject exclude-package-data): the lock says so, the
    artifact proves the tree without them; a lock listing a directory the
    artifact does ship refuses the artifact."""
    from sgl_overlay import errors
    from sgl_overlay.base_tree import base_from_artifact

    assert lock.excluded == ("kernels/aot",)
    wrong = dataclasses.replace(lock, excluded=("kernels/aot", "srt/layers"))
    with pytest.raises(errors.IntegrityError, match=r"python/sglang/srt/layers is in the artifact"):
        base_from_artifact(wrong, tmp_path / "tree")
