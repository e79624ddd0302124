"""Bad input is exit 2 naming the field, entry or path; nothing is written."""
import os
import re
import zipfile

import pytest

from tests.apply.support import SIZING
from sgl_overlay import archive, errors


def drop_line(text, pattern):
    out = re.sub(pattern, "", text, count=1, flags=re.M)
    assert out != text
    return out


@pytest.mark.parametrize("pattern,field", [
    (r'^commit = .*\n', "upstream.commit"),
    (r'^tree_normalized = .*\n', "upstream.tree_normalized"),
    (r'^sha256 = .*\n', "artifact.sha256"),
    (r'^executable = \[[^\]]*\]\n', "artifact.reconcile.executable"),
    (r'^torch = .*\n', "dependencies.torch"),
])
def test_missing_lock_field_is_exit_2_naming_it(project, pattern, field):
    lock = project.root / "upstream.lock"
    lock.write_text(drop_line(lock.read_text(), pattern))
    r = project.apply()
    assert r.returncode == 2
    assert f"missing field '{field}'" in r.stderr
    assert not project.out.exists()


def test_malformed_lock_field_is_exit_2_naming_it(project, lock):
    path = project.root / "upstream.lock"
    path.write_text(path.read_text().replace(f'commit = "{lock.commit[:8]}', f'commit = "zz{lock.commit[2:8]}'))
    r = project.apply("--json")
    assert r.returncode == 2
    assert "field 'upstream.commit' is malformed" in r.data["error"]


def test_series_entry_without_file_and_stray_patch(project, patches):
    project.series(["missing.patch"])
    r = project.apply()
    assert r.returncode == 2 and "series entry 'missing.patch' has no file" in r.stderr
    text, _ = patches.make([(SIZING, "import logging\n", "import logging  # s\n")])
    project.series([], {"stray.patch": text})
    r = project.apply()
    assert r.returncode == 2 and "patches/stray.patch is not in the series" in r.stderr
    project.series(["0001-stray.patch"], {"0001-stray.patch": text})
    r = project.apply()
    assert r.returncode == 2 and "numeric prefix" in r.stderr


@pytest.mark.parametrize("trailers,message", [
    ("Topic: test\n", "missing trailer 'Upstream-Status:'"),
    ("Upstream-Status: Maybe later\nTopic: test\n", "is not one of Yocto's forms"),
    ("Upstream-Status: Submitted\nTopic: test\n", "is not one of Yocto's forms"),
    ("Upstream-Status: Pending\n", "missing trailer 'Topic:'"),
])
def test_patch_trailers_are_checked(project, patches, trailers, message):
    text, _ = patches.make([(SIZING, "import logging\n", "import logging  # t\n")], trailers=trailers)
    project.series(["t.patch"], {"t.patch": text})
    r = project.apply()
    assert r.returncode == 2 and message in r.stderr and "patches/t.patch" in r.stderr
    listed = project.apply("--list")            # --list still shows it, with the problem
    assert listed.returncode == 2 and message in listed.stdout


def test_patch_body_is_required(project, patches):
    text, _ = patches.make([(SIZING, "import logging\n", "import logging  # t\n")], body="")
    project.series(["t.patch"], {"t.patch": text})
    r = project.apply()
    assert r.returncode == 2 and "has no body" in r.stderr


@pytest.mark.parametrize("path,why", [
    ("../outside.py", "climbs out with '..'"),
    ("python/../../outside.py", "climbs out with '..'"),
    ("sgl-kernel/setup.py", "is outside python/"),
    ("python/.git/config", "points into a .git directory"),
])
def test_patch_paths_are_checked_before_anything_is_written(project, patches, path, why, tmp_path):
    text, _ = patches.make([(SIZING, "import logging\n", "import logging  # t\n")])
    evil = text.replace(SIZING, path)
    project.series(["evil.patch"], {"evil.patch": evil})
    r = project.apply()
    assert r.returncode == 2, r.stderr
    assert why in r.stderr and "patches/evil.patch" in r.stderr
    assert not project.out.exists() and not (project.root / "outside.py").exists()


def test_overlay_paths_are_checked(project, tmp_path):
    project.overlay("etc/evil.conf", "x\n")
    r = project.apply()
    assert r.returncode == 2 and "is outside python/" in r.stderr
    (project.root / "overlay" / "etc" / "evil.conf").unlink()
    target = tmp_path / "secret.txt"
    target.write_text("secret")
    link = project.root / "overlay" / "python" / "sglang" / "link.py"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    r = project.apply()
    assert r.returncode == 2 and "not a regular file" in r.stderr
    assert not project.out.exists()


def test_archive_member_paths_are_checked(tmp_path):
    for name in ("../evil.py", "/abs/evil.py", "sglang/../../evil.py"):
        whl = tmp_path / "sglang-0.0.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("sglang/__init__.py", "")
            z.writestr(name, "boom")
        with pytest.raises(errors.IntegrityError) as e:
            archive.extract_package(whl, "sglang", tmp_path / "out")
        assert e.value.code == 3 and repr(name) in e.value.message
        assert not (tmp_path / "evil.py").exists() and not (tmp_path.parent / "evil.py").exists()
    link = tmp_path / "link.whl"
    with zipfile.ZipFile(link, "w") as z:
        info = zipfile.ZipInfo("sglang/link.py")
        info.external_attr = (0o120777 << 16)
        z.writestr(info, "/etc/passwd")
    with pytest.raises(errors.IntegrityError, match="not a regular file"):
        archive.extract_package(link, "sglang", tmp_path / "out2")


def test_usage_errors_are_exit_2(project):
    r = project.apply("--no-such-flag")
    assert r.returncode == 2 and "unrecognized arguments" in r.stderr
    r = project.apply("--check", "--list")
    assert r.returncode == 2


def symlink_patch(patches, links, subject="Add a link"):
    """A git format-patch mail creating the symlinks ``links`` ({path: target})."""
    return patches.make([], subject=subject, body="Why it exists.", links=links)[0]


@pytest.mark.parametrize("target,why", [
    ("/etc/passwd", "is absolute"),
    ("../../../etc/passwd", "climbs out of the tree"),
    ("srt/../../../../etc", "climbs out of the tree"),
])
def test_patch_symlink_pointing_outside_the_tree_is_refused(project, patches, target, why):
    text = symlink_patch(patches, {"python/sglang/evil": target})
    assert "new file mode 120000" in text
    project.series(["link.patch"], {"link.patch": text})
    r = project.apply()
    assert r.returncode == 2, r.stderr
    assert f"patches/link.patch: symlink 'python/sglang/evil' -> {target!r} {why}" in r.stderr
    assert not project.out.exists()


def test_patch_symlink_escaping_through_another_symlink_is_refused(project, patches):
    # each target is inside the tree when read on its own; followed through
    # srt/up (which points two levels up, to python/), evil climbs above the tree
    text = symlink_patch(patches, {"python/sglang/srt/up": "../..",
                                   "python/sglang/evil": "srt/up/../../../../etc"})
    project.series(["link.patch"], {"link.patch": text})
    r = project.apply()
    assert r.returncode == 2, r.stderr
    assert ("patches/link.patch: symlink 'python/sglang/evil' -> 'srt/up/../../../../etc' "
            "resolves outside the tree") in r.stderr
    assert not project.out.exists()


def test_patch_symlink_inside_the_tree_is_built(project, patches):
    text = symlink_patch(patches, {"python/sglang/alias.py": "srt/model_executor/pool_configurator.py"})
    project.series(["link.patch"], {"link.patch": text})
    r = project.apply()
    assert r.returncode == 0, r.stderr
    link = project.out / "python" / "sglang" / "alias.py"
    assert os.readlink(link) == "srt/model_executor/pool_configurator.py"
