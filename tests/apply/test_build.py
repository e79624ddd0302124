"""Fresh build, tree-id proof, warm no-op, --check, --list, manifest."""

from tests.apply.support import SIZING, POOL


def two_patches(patches):
    p1, c1 = patches.make([(POOL, 'msg = "Not enough memory. Please try to increase --mem-fraction-static."',
                            'msg = "Not enough memory for the KV cache. Please try to increase --mem-fraction-static."')],
                          subject="Say which memory is missing", date="2026-06-01T10:00:00+00:00")
    p2, _ = patches.make([(SIZING, "import logging\n", "import logging  # sizing\n")],
                         subject="Mark the sizing module", on=c1, author="Bo Example <bo@example.com>",
                         date="2026-06-02T11:30:00+00:00")
    return {"say-which-memory.patch": p1, "mark-sizing.patch": p2}


def test_fresh_build_proves_tree_and_records_history(project, patches, lock):
    files = two_patches(patches)
    project.series(list(files), files)
    project.overlay("python/sglang/srt/speculative/extra_module.py", "VALUE = 1\n")
    r = project.apply("--json")
    assert r.returncode == 0, r.stderr
    m = r.data["manifest"]
    assert m["tree_normalized"] == lock.tree_normalized
    assert m["lock"]["commit"] == lock.commit
    # history: upstream base, one commit per patch in order, then the overlay
    log = project.git("log", "--format=%an|%aI|%s", "upstream..patched").splitlines()
    assert log == [
        f"sgl-overlay|{lock.date}T00:00:00+00:00|overlay: 1 file(s) from overlay/",  # the pin's date
        "Bo Example|2026-06-02T11:30:00+00:00|Mark the sizing module",
        "Ada Example|2026-06-01T10:00:00+00:00|Say which memory is missing",
    ]
    assert project.git("symbolic-ref", "HEAD") == "refs/heads/patched"
    assert project.git("rev-list", "--count", "upstream") == "1"
    assert project.git("rev-parse", "upstream:python/sglang") and \
        project.git("rev-parse", "HEAD") == m["head"]
    text = (project.out / POOL).read_text()
    assert "Not enough memory for the KV cache." in text
    assert (project.out / "python/sglang/srt/speculative/extra_module.py").read_text() == "VALUE = 1\n"
    assert project.git("status", "--porcelain") == ""
    # the base commit is reproducible: the same bytes give the same id
    assert m["base_commit"] == project.git("rev-parse", "upstream")
    assert "progress" not in r.stdout and "[apply" in r.stderr


def test_warm_rebuild_is_a_no_op_and_stack_change_rebuilds(project, patches):
    files = two_patches(patches)
    project.series(list(files), files)
    first = project.apply("--json")
    assert first.returncode == 0, first.stderr
    head = first.data["manifest"]["head"]
    again = project.apply()
    assert again.returncode == 0 and "up to date" in again.stdout
    # a change to the stack rebuilds; the old tree is replaced atomically
    project.series(["say-which-memory.patch"], {})
    (project.root / "patches" / "mark-sizing.patch").unlink()
    third = project.apply("--json")
    assert third.returncode == 0, third.stderr
    assert third.data["status"] == "built" and third.data["manifest"]["head"] != head
    assert project.git("rev-list", "--count", "upstream..patched") == "1"
    assert not list(project.out.parent.glob(".sglang.tmp-*"))


def test_check_reports_each_patch_and_leaves_nothing(project, patches, tmp_path):
    files = two_patches(patches)
    project.series(list(files), files)
    r = project.apply("--check", "--json")
    assert r.returncode == 0, r.stderr
    assert [p["status"] for p in r.data["patches"]] == ["applied", "applied"]
    assert not project.out.exists() and not project.out.parent.exists()


def test_list_shows_topic_status_files_and_lines(project, patches):
    files = two_patches(patches)
    project.series(list(files), files)
    r = project.apply("--list")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["#", "patch", "topic", "upstream-status", "files", "lines"]
    assert lines[2].split() == ["1", "say-which-memory.patch", "test", "Pending", "1", "+1/-1"]
    assert lines[3].split() == ["2", "mark-sizing.patch", "test", "Pending", "1", "+1/-1"]
    j = project.apply("--list", "--json")
    assert [p["files"] for p in j.data["patches"]] == [[POOL], [SIZING]]


def test_existing_directory_not_made_by_the_tool_is_never_replaced(project):
    project.out.mkdir(parents=True)
    (project.out / "precious.txt").write_text("mine")
    r = project.apply()
    assert r.returncode == 2
    assert "was not made by this tool" in r.stderr
    assert (project.out / "precious.txt").read_text() == "mine"


def test_local_changes_in_the_build_are_protected(project, patches):
    files = two_patches(patches)
    project.series(list(files), files)
    assert project.apply().returncode == 0
    (project.out / SIZING).write_text("edited by hand\n")
    r = project.apply()
    assert r.returncode == 2 and "local changes" in r.stderr and "--force" in r.stderr
    assert (project.out / SIZING).read_text() == "edited by hand\n"
    forced = project.apply("--force")
    assert forced.returncode == 0, forced.stderr
    assert (project.out / SIZING).read_text() != "edited by hand\n"
