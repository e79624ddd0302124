"""The memory and debug patch files: headers, trailers, bodies, paths; the
patch the move to v0.5.17 dropped, with its reason in the series."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = {
    "budget-ledger.patch": ("memory", "Pending", ["0c065671c9", "dea85c30f4", "59ef3b15cc"]),
    "fit-request-count.patch": ("memory", "Pending", ["0c065671c9", "dea85c30f4", "59ef3b15cc"]),
    "over-budget-start.patch": ("memory", "Pending", ["59ef3b15cc", "dea85c30f4"]),
    "memory-ledger.patch": ("debug", "Inappropriate [debug instrumentation]", []),
}


def _series_block(topic, comments=False):
    lines, inside = [], False
    for line in (ROOT / "patches" / "series").read_text().splitlines():
        if line.startswith("# -- Topic:"):
            inside = line.startswith(f"# -- Topic: {topic} ")
        elif inside and line.strip() and (comments or not line.startswith("#")):
            # an entry without its comment (its applies: range), a comment line whole
            lines.append(line.strip() if line.startswith("#") else line.split("#", 1)[0].strip())
    return lines


@pytest.mark.parametrize("name", PATCHES)
def test_patch_file(name):
    topic, status, commits = PATCHES[name]
    text = (ROOT / "patches" / name).read_text()
    assert name in _series_block(topic), f"{name} is not under the {topic} block of patches/series"
    head, _, diff = text.partition("\n---\n")
    assert re.search(r"^Subject: \[PATCH\] \S", head, re.M)
    assert f"\nUpstream-Status: {status}\n" in head + "\n"
    assert f"\nTopic: {topic}\n" in head + "\n"
    body = head.split("\n\n", 1)[1]
    assert "Drop this patch when" in body, "the body says when the patch can be dropped"
    for c in commits:
        assert c in body, f"the body names the overlapping upstream commit {c}"
    paths = re.findall(r"^diff --git a/(\S+) b/", diff, re.M)
    assert paths and all(p.startswith("python/") for p in paths), paths


def test_memory_patches_in_the_order_they_build_on():
    assert _series_block("memory") == ["budget-ledger.patch", "fit-request-count.patch", "over-budget-start.patch",
                                       "memory-reserve-the-speculative-conv-windows.patch",
                                       "memory-where-no-single-flag-fits.patch"]


def test_the_dropped_reservation_patch_names_its_upstream_commits():
    """mamba-spec-reservation.patch left the stack at v0.5.17: the series says
    which upstream commits cover it (tests/memory/test_allocation.py shows the
    pin reserving what its pools allocate)."""
    block = " ".join(_series_block("memory", comments=True))
    assert "dropped at v0.5.17: mamba-spec-reservation.patch" in block
    assert "59ef3b15cc (#32184, v0.5.17)" in block and "dea85c30f4 (#23837, v0.5.13)" in block
    assert not (ROOT / "patches" / "mamba-spec-reservation.patch").exists()
