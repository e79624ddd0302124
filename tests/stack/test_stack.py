"""tools/stack.py on real releases: classification, refresh, export, lint."""
import json
import subprocess
import sys

import pytest

from tests.apply.support import SIZING, POOL, ROOT
from sgl_overlay import base_tree, gitcmd, release_trees, stack

STACK = ROOT / "tools" / "stack.py"
LORA = "python/sglang/srt/lora/backend/torch_backend.py"
HOOKS = "python/sglang/srt/model_executor/hook_manager.py"
# a later release than the pin, and a line of the pin's pool_configurator.py it reworked
LATER = "0.5.23"
# a line of the pin's pool_configurator.py that v0.5.23 reworked (its deepseek_v4 imports)
RING_IMPORT = "from sglang.srt.mem_cache.deepseek_v4_memory_pool import get_compress_state_ring_size\n"


def run(project, *args):
    p = subprocess.run([sys.executable, str(STACK), *args, "--root", str(project.root)],
                       capture_output=True, text=True, timeout=900)
    p.data = json.loads(p.stdout) if "--json" in args and p.stdout.strip().startswith("{") else None
    return p


@pytest.mark.parametrize("tried,status", [
    ((True, False, False, False, False, False), "applied"),
    ((False, True, False, False, False, False), "merged-upstream"),
    ((False, False, True, False, False, False), "merged-upstream"),
    ((False, False, False, True, False, False), "applied-3way"),
    ((False, False, False, False, True, False), "emptied"),
    ((False, False, False, False, False, True), "probably-upstream"),
    ((False, False, False, False, False, False), "conflict"),
])
def test_classify_is_a_pure_function_of_what_git_reported(tried, status):
    assert stack.classify(*tried) == status


def upstream_change(version, path):
    """The real upstream change of ``path`` from the pin to ``version``."""
    tree = release_trees.release_tree(version)
    return (tree / "sglang" / path.split("/", 2)[2]).read_text()


def test_rebase_onto_a_later_release_classifies_each_patch(project, patches):
    applied, _ = patches.make([(HOOKS, "import fnmatch\n", "import fnmatch  # kept\n")], subject="Kept")
    merged, _ = patches.make([(LORA, None, upstream_change(LATER, LORA))], subject="Backport lora fix")
    conflict, _ = patches.make([(POOL, RING_IMPORT, RING_IMPORT.replace("\n", "  # ours\n"))],
                               subject="Touch what upstream reworked")
    files = {"kept.patch": applied, "lora.patch": merged, "ring.patch": conflict}
    project.series(list(files), files)
    r = run(project, "check", "--against", LATER, "--json")
    assert r.returncode == 1, r.stderr                          # one conflict: unresolved
    got = {p["patch"]: p["status"] for p in r.data["patches"]}
    assert got == {"kept.patch": "applied", "lora.patch": "merged-upstream", "ring.patch": "conflict"}
    fail = r.data["patches"][2]["failure"]
    assert fail["file"] == POOL and RING_IMPORT.rstrip("\n") in fail["expected"]
    # the nearest place is text of the later release's own file (its reworked import block)
    later = upstream_change(LATER, POOL).splitlines()
    assert fail["nearest"]["text"] and all(line in later for line in fail["nearest"]["text"]), fail["nearest"]
    assert r.data["base"]["version"] == LATER
    assert not r.data["resolved"]
    # --write refuses while anything is unresolved, and changes nothing
    before = (project.root / "upstream.lock").read_text()
    w = run(project, "rebase", "--onto", LATER, "--write")
    assert w.returncode == 1 and "not writing" in w.stderr
    assert (project.root / "upstream.lock").read_text() == before


def test_refresh_of_an_unchanged_tree_writes_nothing_and_one_line_rewrites_one_file(project, patches):
    p1, c1 = patches.make([(POOL, "import logging\n", "import logging  # one\n")], subject="One")
    p2, _ = patches.make([(SIZING, "import logging\n", "import logging  # two\n")], subject="Two", on=c1)
    project.series(["one.patch", "two.patch"], {"one.patch": p1, "two.patch": p2})
    assert project.apply().returncode == 0
    mtimes = {f.name: f.stat().st_mtime_ns for f in (project.root / "patches").iterdir()}
    r = run(project, "refresh", "--tree", str(project.out), "--json")
    assert r.returncode == 0 and r.data["changes"] == [] and not r.data["series_changed"]
    assert {f.name: f.stat().st_mtime_ns for f in (project.root / "patches").iterdir()} == mtimes
    assert run(project, "refresh", "--check").returncode == 0          # re-export reproduces patches/
    # a fix to the first patch, folded in with rebase --autosquash
    (project.out / POOL).write_text((project.out / POOL).read_text().replace("# one", "# one, fixed"))
    first = project.git("rev-list", "--reverse", "upstream..patched").split()[0]
    gitcmd.run(project.out, "commit", "-qam", f"fixup! One")
    gitcmd.run(project.out, "rebase", "-q", "-i", "--autosquash", "upstream",
               env={"GIT_SEQUENCE_EDITOR": "true"})
    assert first != project.git("rev-list", "--reverse", "upstream..patched").split()[0]
    chk = run(project, "refresh", "--tree", str(project.out), "--check", "--json")
    assert chk.returncode == 1 and [c["patch"] for c in chk.data["changes"]] == ["one.patch"]
    r = run(project, "refresh", "--tree", str(project.out), "--json")
    assert [c["change"] for c in r.data["changes"]] == ["rewritten"]
    changed = [f.name for f in (project.root / "patches").iterdir() if f.stat().st_mtime_ns != mtimes[f.name]]
    assert changed == ["one.patch"]
    assert "# one, fixed" in (project.root / "patches" / "one.patch").read_text()
    assert (project.root / "patches" / "two.patch").read_text() == p2


def test_refresh_refuses_a_tree_the_builder_did_not_make(project, tmp_path):
    """--tree that does not exist, or is not a built tree (no upstream/patched branches): exit 2
    before any work, naming the folder and what to give instead; nothing written beside it."""
    plain = tmp_path / "plain"
    plain.mkdir()
    gitcmd.init(tmp_path / "other")              # a git repository with branch 'upstream' only
    gitcmd.run(tmp_path / "other", "commit", "--quiet", "--allow-empty", "-m", "base")
    for tree, why in ((tmp_path / "missing" / "sglang", "no such folder"), (plain, "no branch 'upstream'"),
                      (tmp_path / "other", "no branch 'patched'")):
        before = sorted(p.name for p in tree.parent.iterdir()) if tree.parent.exists() else None
        r = run(project, "refresh", "--tree", str(tree), "--json")
        assert r.returncode == 2, r.stderr
        assert r.data["exit_code"] == 2 and f"--tree {tree}: " in r.data["error"] and why in r.data["error"], r.data
        assert "apply.py --out DIR" in r.data["hint"] and "Traceback" not in r.stderr and "unexpected" not in r.stderr
        assert (sorted(p.name for p in tree.parent.iterdir()) if tree.parent.exists() else None) == before


def test_noise_free_ignores_index_lines_offsets_and_stat():
    a = "From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\nSubject: x\n\nbody\n---\n" \
        " f | 2 +-\n\ndiff --git a/python/f b/python/f\nindex 1234567..89abcde 100644\n--- a/python/f\n" \
        "+++ b/python/f\n@@ -10,3 +10,3 @@ def f():\n a\n-b\n+c\n"
    b = a.replace("1111", "2222").replace("1234567..89abcde", "7654321..edcba98").replace(
        "@@ -10,3 +10,3 @@", "@@ -42,3 +43,3 @@").replace(" f | 2 +-", " f | 2 ++--")
    assert stack.noise_free(a) == stack.noise_free(b)
    assert stack.noise_free(a) != stack.noise_free(a.replace("+c", "+d"))


def test_lint_findings(project, patches):
    ws, _ = patches.make([(SIZING, "import logging\n", "import logging   \n")], subject="Trailing space")
    dbg, _ = patches.make([(POOL, "import logging\n", "import logging  # dbg\n")], subject="Debug",
                          trailers="Upstream-Status: Pending\nTopic: debug\n")
    project.series(["ws.patch", "dbg.patch"], {"ws.patch": ws, "dbg.patch": dbg})
    r = run(project, "lint", "--json")
    assert r.returncode == 1
    fields = sorted((p["patch"], p["field"]) for p in r.data["problems"])
    assert fields == [("dbg.patch", "Upstream-Status"), ("ws.patch", "whitespace")]
    project.series([], {})
    for f in ("ws.patch", "dbg.patch"):
        (project.root / "patches" / f).unlink()
    assert run(project, "lint").returncode == 0


def test_export_refuses_inappropriate_and_writes_a_clean_topic(project, patches, tmp_path):
    dbg, _ = patches.make([(POOL, "import logging\n", "import logging  # dbg\n")], subject="Debug",
                          trailers="Upstream-Status: Inappropriate [debug instrumentation]\nTopic: debug\n")
    good, _ = patches.make([(HOOKS, "import fnmatch\n", "import fnmatch  # upstreamable\n")],
                           subject="Something upstream wants", trailers="Upstream-Status: Pending\nTopic: hooks\n")
    project.series(["dbg.patch", "good.patch"], {"dbg.patch": dbg, "good.patch": good})
    r = run(project, "export", "--topic", "debug", "--onto", LATER, "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "Inappropriate" in r.stderr
    out = tmp_path / "pr"
    r = run(project, "export", "--topic", "hooks", "--onto", LATER, "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert r.data["status"] == "exported"
    files = sorted(p.name for p in out.iterdir())
    assert files == ["0001-something-upstream-wants.patch", "pull-request.md"]
    mail = (out / files[0]).read_text()
    assert "Topic:" not in mail and "Upstream-Status:" not in mail
    assert "Subject: [PATCH] Something upstream wants" in mail
    assert "Something upstream wants" in (out / "pull-request.md").read_text()


def test_write_updates_the_lock_verified_against_the_tag(project, patches, lock, tmp_path):
    # a local upstream whose tags hold the real release trees
    repo = tmp_path / "upstream"
    for version in (lock.version, LATER):
        d = tmp_path / f"base-{version}"
        base_tree.base_from_release(version, d, symlinks=lock.symlinks)
        if not repo.exists():
            gitcmd.run(None, "clone", "-q", str(d), str(repo))
        else:
            gitcmd.run(repo, "fetch", "-q", str(d), "upstream")
            tree = gitcmd.out(repo, "rev-parse", "FETCH_HEAD^{tree}")
            c = gitcmd.out(repo, "commit-tree", tree, "-p", "HEAD", "-m", f"release {version}")
            gitcmd.run(repo, "reset", "-q", "--hard", c)
        gitcmd.run(repo, "tag", f"v{version}")
    kept, _ = patches.make([(HOOKS, "import fnmatch\n", "import fnmatch  # kept\n")], subject="Kept")
    merged, _ = patches.make([(LORA, None, upstream_change(LATER, LORA))], subject="Backport lora fix")
    project.series(["kept.patch", "lora.patch"], {"kept.patch": kept, "lora.patch": merged})
    r = run(project, "rebase", "--onto", LATER, "--repo", str(repo), "--write", "--json")
    assert r.returncode == 0, r.stderr
    assert r.data["written"]["dropped"] == ["lora.patch"]
    lock_text = (project.root / "upstream.lock").read_text()
    assert f'version = "{LATER}"' in lock_text and f'tag = "v{LATER}"' in lock_text
    assert gitcmd.out(repo, "rev-parse", f"v{LATER}") in lock_text
    assert "lora.patch" not in (project.root / "patches" / "series").read_text()
    # the new lock builds: the artifact reconciled with it reproduces the tag's tree
    b = project.apply("--json")
    assert b.returncode == 0, b.stderr
    assert b.data["manifest"]["tree"] == gitcmd.out(repo, "rev-parse", f"v{LATER}:python/sglang")


@pytest.mark.parametrize("tried,status", [
    # a forward apply wins over everything else git reported
    ((True, True, True, True, True, True), "applied"),
    # merged-upstream (reverse or patch-id) wins over the 3-way results and the reduced reverse
    ((False, True, False, True, True, True), "merged-upstream"),
    ((False, False, True, True, True, True), "merged-upstream"),
    # an emptied 3-way merge wins over a 3-way that worked
    ((False, False, False, True, True, True), "emptied"),
    # a 3-way that worked wins over the reduced-context reverse
    ((False, False, False, True, False, True), "applied-3way"),
])
def test_classify_precedence(tried, status):
    assert stack.classify(*tried) == status


def test_a_results_json_leaves_out_what_it_does_not_know_and_never_shows_the_mail():
    """A verb's --json has a patch's keys only where they are known (as the
    verbs always wrote them) and never the whole mail text (json_form)."""
    p = stack.RebasedPatch("a.patch", 1, "a: b", "t", stack.Status.APPLIED, commit="c0ffee", text="From c0ffee ...",
                           changed=False)
    assert p.to_json() == {"patch": "a.patch", "index": 1, "subject": "a: b", "topic": "t", "status": "applied",
                           "commit": "c0ffee", "changed": False}
    r = stack.RebaseReport("0.5.23", {"base_commit": "c0ffee"}, (p,), True, ported=0, port_line="")
    assert json.loads(json.dumps(r, default=lambda v: v.to_json())) == {
        "onto": "0.5.23", "base": {"base_commit": "c0ffee"}, "resolved": True, "ported": 0, "port_line": "",
        "patches": [p.to_json()]}
    assert (r.exit_code, stack.RebaseReport("0.5.23", {}, (), False).exit_code) == (0, 1)
