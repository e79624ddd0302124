"""series.without (the stack less one patch) and the tests' tree built from it
(tests/conftest.py build_without, behind the fixture ``stack_without``)."""
import shutil

import pytest

from tests.apply.support import SIZING, ROOT
from tests.conftest import build_without
from sgl_overlay import errors, series


@pytest.mark.parametrize("name", ["over-budget-start.patch", "sm120-communication.patch"])
def test_without_is_the_stack_of_a_series_lacking_the_patch(name, tmp_path):
    """Oracle: the same project copied with the entry and its file removed, loaded by series.load."""
    whole = series.load(ROOT)
    copy = tmp_path / "proj"
    shutil.copytree(ROOT / "patches", copy / "patches", ignore=shutil.ignore_patterns("ports"))
    shutil.copytree(ROOT / "overlay", copy / "overlay")
    (copy / "patches" / name).unlink()
    series_file = copy / "patches" / "series"
    lines = series_file.read_text().splitlines(keepends=True)
    series_file.write_text("".join(l for l in lines if l.split("#", 1)[0].strip() != name))
    expected = series.load(copy)
    got = series.without(whole, name)
    assert [(p.index, p.name) for p in got.patches] == [(p.index, p.name) for p in expected.patches]
    assert len(got.patches) == len(whole.patches) - 1
    assert [o.rel for o in got.overlay] == [o.rel for o in whole.overlay]
    assert got.digest == expected.digest != whole.digest
    assert [p.index for p in whole.patches] == list(range(1, len(whole.patches) + 1)), "the whole stack is unchanged"


def test_without_a_patch_not_in_the_series_is_a_usage_error():
    with pytest.raises(errors.UsageError, match=r"'no-such\.patch' is not in the series") as e:
        series.without(series.load(ROOT), "no-such.patch")
    assert e.value.code == errors.USAGE and "patches/series" in e.value.hint


def test_a_series_that_needs_the_dropped_patch_fails_naming_both(project, patches, lock, tmp_path):
    """b.patch edits the line a.patch adds: without a.patch the build fails with the
    builder's diagnosis of b.patch, and nothing is left at the destination."""
    a, _ = patches.make([(SIZING, "import logging\n", "import logging\n# added by a\n")], subject="Add a line")
    b, _ = patches.make([(SIZING, "import logging\n# added by a\n", "import logging\n# changed by b\n")],
                        subject="Change that line", on="HEAD")
    project.series(["a.patch", "b.patch"], {"a.patch": a, "b.patch": b})
    dest = tmp_path / "out" / "sglang"
    with pytest.raises(pytest.fail.Exception) as e:
        build_without(lock, project.root, "a.patch", dest)
    text = str(e.value)
    assert text.startswith("the series without a.patch does not apply to the pin")
    assert "patch 1/1 b.patch ('Change that line') does not apply" in text and f"file: {SIZING}" in text, text
    assert not dest.exists()
    assert build_without(lock, project.root, "b.patch", dest) == dest
    assert "# added by a" in (dest / SIZING).read_text()
