"""What goes wrong, and what the user is told: conflicts, patches already
upstream, killed runs, stale overlays, bad checksums."""
import signal
import subprocess
import sys

from tests.apply.support import APPLY, SIZING, POOL
from sgl_overlay import gitcmd

OLD = 'msg = "Not enough memory. Please try to increase --mem-fraction-static."'


def conflicting(patches):
    """Patch 1 rewrites a line; patch 2 was made against the pristine line,
    so after patch 1 its context is gone (the typical rotten patch)."""
    p1, _ = patches.make([(POOL, OLD, 'msg = "Not enough memory (see the ledger)."')], subject="Reword the error")
    p2, _ = patches.make([(POOL, OLD, OLD + "  # noqa")], subject="Annotate the error")
    return p1, p2


def test_conflict_names_patch_file_hunk_context_and_nearest_place(project, patches):
    p1, p2 = conflicting(patches)
    project.series(["reword.patch", "annotate.patch"], {"reword.patch": p1, "annotate.patch": p2})
    r = project.apply("--json")
    assert r.returncode == 1
    f = r.data["failure"] if "failure" in r.data else r.data["patches"][-1]["failure"]
    assert (f["index"], f["total"], f["patch"], f["subject"]) == (2, 2, "annotate.patch", "Annotate the error")
    assert f["file"] == POOL
    assert f["hunk"].startswith("@@ -") and f["hunk"].endswith("@@") or "@@" in f["hunk"]
    assert any(OLD in line for line in f["expected"])
    near = f["nearest"]
    # the nearest place is where patch 1 put its reworded line
    assert any("see the ledger" in line for line in near["text"]) and near["similarity"] > 0.6
    assert f["applies_in_reverse"] is False
    text = subprocess.run([sys.executable, str(APPLY), "--root", str(project.root), "--out", str(project.out)],
                          capture_output=True, text=True).stderr
    assert "patch 2/2 annotate.patch ('Annotate the error') does not apply" in text
    assert f"file: {POOL}" in text and "hunk: @@" in text and "context not found:" in text
    assert "nearest place: " + POOL in text
    assert not project.out.exists()          # nothing half-built


def test_check_reports_every_patch_and_keeps_going(project, patches):
    p1, p2 = conflicting(patches)
    p3, _ = patches.make([(SIZING, "import logging\n", "import logging  # x\n")], subject="Independent")
    project.series(["reword.patch", "annotate.patch", "independent.patch"],
                   {"reword.patch": p1, "annotate.patch": p2, "independent.patch": p3})
    r = project.apply("--check", "--json")
    assert r.returncode == 1
    assert [p["status"] for p in r.data["patches"]] == ["applied", "failed", "applied"]
    assert r.data["patches"][1]["failure"]["file"] == POOL


def test_patch_already_upstream_is_reported_as_applying_in_reverse(project, patches, base_tree):
    # a patch whose change upstream already has: made from a tree where the
    # line was missing, to the upstream text
    text = (base_tree / POOL).read_text()
    assert OLD in text
    pre, c = patches.make([(POOL, OLD + "\n", "")], subject="(scratch) remove the line")
    already, _ = patches.make([(POOL, None, text)], subject="Add the memory message", on=c)
    project.series(["already.patch"], {"already.patch": already})
    r = project.apply("--json")
    assert r.returncode == 1
    f = r.data["failure"]
    assert f["applies_in_reverse"] is True
    r2 = project.apply()
    assert "applies in reverse: its change is already upstream" in r2.stderr


def test_failed_build_leaves_the_previous_tree_untouched(project, patches):
    good, c = patches.make([(SIZING, "import logging\n", "import logging  # ok\n")], subject="Good")
    project.series(["good.patch"], {"good.patch": good})
    assert project.apply().returncode == 0
    head = project.git("rev-parse", "HEAD")
    p1, p2 = conflicting(patches)
    project.series(["good.patch", "reword.patch", "annotate.patch"], {"reword.patch": p1, "annotate.patch": p2})
    assert project.apply().returncode == 1
    assert project.git("rev-parse", "HEAD") == head
    assert project.git("status", "--porcelain") == ""
    assert not list(project.out.parent.glob(".sglang.tmp-*"))


def test_killed_run_leaves_the_old_tree_intact(project, patches):
    first, c = patches.make([(SIZING, "import logging\n", "import logging  # v1\n")], subject="v1")
    project.series(["v1.patch"], {"v1.patch": first})
    assert project.apply().returncode == 0
    head = project.git("rev-parse", "HEAD")
    manifest = (project.out / ".sgl-overlay-build.json").read_text()
    # a long series, so the kill lands while patches are being applied
    files, on = {}, "upstream"
    for i in range(25):
        t, on = patches.make([(SIZING, "import logging", f"import logging  # step {i}\nimport logging")],
                             subject=f"Step {i}", on=on)
        files[f"step-{i}.patch"] = t
    (project.root / "patches" / "v1.patch").unlink()
    project.series(list(files), files)
    proc = subprocess.Popen([sys.executable, str(APPLY), "--root", str(project.root), "--out", str(project.out)],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "applying patch 3/25" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert project.git("rev-parse", "HEAD") == head
    assert (project.out / ".sgl-overlay-build.json").read_text() == manifest
    assert project.git("status", "--porcelain") == ""
    leftovers = list(project.out.parent.glob(".sglang.tmp-*"))
    assert leftovers                         # the killed run's scratch tree ...
    r = project.apply()
    assert r.returncode == 0, r.stderr
    assert not list(project.out.parent.glob(".sglang.tmp-*"))   # ... is cleaned by the next run
    assert project.git("rev-list", "--count", "upstream..patched") == "25"


def test_stale_overlay_and_unrecorded_replacement_fail(project, base_tree):
    rel = "python/sglang/srt/utils/common.py"
    real_blob = subprocess.run(["git", "-C", str(base_tree), "rev-parse", f"upstream:{rel}"],
                               capture_output=True, text=True).stdout.strip()
    project.overlay(rel, "# replaced\n")
    r = project.apply()
    assert r.returncode == 1 and "does not record it" in r.stderr and real_blob in r.stderr
    project.overlay(rel, "# replaced\n", replaces="0" * 40)
    r = project.apply()
    assert r.returncode == 1 and "is stale" in r.stderr and real_blob[:12] in r.stderr
    (project.root / "overlay" / "overlay.toml").write_text(f'[replaces]\n"{rel}" = "{real_blob}"\n')
    r = project.apply()
    assert r.returncode == 0, r.stderr
    assert (project.out / rel).read_text() == "# replaced\n"


def test_checksum_mismatch_discards_the_cached_file(project, lock, tmp_path):
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    bad = cache / "artifacts" / lock.artifact_filename
    bad.write_bytes(b"not the release")
    r = project.apply("--cache", str(cache))
    assert r.returncode == 3
    assert "does not match" in r.stderr and "discarded" in r.stderr
    assert not bad.exists()
    assert not project.out.exists()


# Forces builder.py's two-rename fallback and kills the run between the two renames.
KILL_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from sgl_overlay import builder
from sgl_overlay.__main__ import main
builder._exchange = lambda a, b: False          # as where renameat2 is unavailable
real_rename = os.rename
def rename(src, dst):
    real_rename(src, dst)
    if Path(dst).name == "old":                 # the old tree is away, the new one not yet in place
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
sys.exit(main(["apply", *sys.argv[1:]]))
"""


def test_killed_fallback_swap_is_recovered_by_the_next_run(project, patches):
    first, c = patches.make([(SIZING, "import logging\n", "import logging  # v1\n")], subject="v1")
    project.series(["v1.patch"], {"v1.patch": first})
    assert project.apply().returncode == 0
    old_head = project.git("rev-parse", "HEAD")
    second, _ = patches.make([(SIZING, "import logging  # v1\n", "import logging  # v2\n")], subject="v2", on=c)
    project.series(["v1.patch", "v2.patch"], {"v2.patch": second})
    p = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, "--root", str(project.root),
                        "--out", str(project.out)], capture_output=True, text=True, timeout=600)
    assert p.returncode == -signal.SIGKILL, p.stderr
    # the crash window: no tree at the destination; both complete trees in the scratch directory
    assert not project.out.exists()
    [scratch] = project.out.parent.glob(".sglang.tmp-*")
    assert gitcmd.out(scratch / "old", "rev-parse", "HEAD") == old_head
    assert "# v2" in (scratch / "tree" / SIZING).read_text()
    assert (scratch / "tree" / ".sgl-overlay-build.json").exists()
    # the next run builds the new tree and removes the scratch directory
    r = project.apply()
    assert r.returncode == 0, r.stderr
    assert not list(project.out.parent.glob(".sglang.tmp-*"))
    assert project.git("log", "--format=%s", "upstream..patched").splitlines() == ["v2", "v1"]
    assert project.git("status", "--porcelain") == ""
    assert "# v2" in (project.out / SIZING).read_text()
