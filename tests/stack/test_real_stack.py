"""The repository's real stack (on the pin, SGLang v0.5.17) rebased onto real
later releases: the classifications follow from what those releases hold
(read here from the release trees themselves, the oracles):
- no release has the memory topic's module (model_executor/memory_budget.py),
  so no memory patch can be merged-upstream or applied silently a second time:
  each is a conflict (or, for a person to confirm, probably-upstream);
- from v0.5.20 ServerArgs no longer runs the all-reduce fusion passes itself
  (they moved to the resolution pipeline's model hook), so the
  communication patch, which adds its pass after them there, conflicts on
  server_args.py; nothing of sm120 is merged upstream.
(The rebases of the old pin's stack, v0.5.12.post1's, onto 0.5.13-0.5.16 were
this file's subject until the move; that stack is in git history, tests/conftest.py EARLIER_PINS.)
"""
import os
import subprocess
from pathlib import Path

import pytest

from tests.apply.support import ROOT
from sgl_overlay import lock as lockmod, release_trees, series, stack

LATER = ["0.5.20", "0.5.23"]
FUSION_SLOT = "run_post_process_pass(self, _enforce_disable_allreduce_fusion)"


@pytest.fixture(scope="module")
def repo_stack():
    return lockmod.load(ROOT / "upstream.lock"), series.load(ROOT)


@pytest.mark.parametrize("version", LATER)
def test_real_stack_classification(repo_stack, version):
    lock, st = repo_stack
    topics = {p.topic for p in st.patches}
    assert {"memory", "sm120"} <= topics, f"the stack lacks a topic: {sorted(topics)}"
    tree = release_trees.release_tree(version) / "sglang"
    assert not (tree / "srt" / "model_executor" / "memory_budget.py").exists()
    assert FUSION_SLOT not in (tree / "srt" / "server_args.py").read_text()
    report = stack.rebase(lock, st, stack.Onto(version=version))
    by_topic = {}
    for r in report.patches:
        by_topic.setdefault(r.topic, []).append(r)
    for r in by_topic["memory"] + by_topic["debug"]:
        assert r.status in ("conflict", "probably-upstream"), (version, r.patch, r.status)
        if r.status == "conflict":
            assert r.failure["file"].startswith("python/sglang/")
    comm = [r for r in by_topic["sm120"] if "communication" in r.patch]
    assert len(comm) == 1 and comm[0].status == "conflict", comm
    assert comm[0].failure["file"] == "python/sglang/srt/server_args.py", comm[0].failure
    assert not any(r.status == "merged-upstream" for r in by_topic["sm120"])
    assert report.resolved is False


def first_patch_applies(release_dir, topic):
    """The oracle, independent of stack.py: plain `git apply --check` of the
    topic's first patch on the release's own files (a/python/sglang/... is
    sglang/... there, hence -p2)."""
    first = next(p for p in series.load(ROOT).patches if p.topic == topic)
    # the release tree may sit inside a git checkout (the tests' cache under build/):
    # git apply there would ignore paths outside that repository's subfolder
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(Path(release_dir).parent))
    r = subprocess.run(["git", "apply", "--check", "-p2", str(first.path)], cwd=release_dir,
                       capture_output=True, text=True, env=env)
    return first.name, r.returncode == 0


@pytest.mark.parametrize("topic", ["memory", "sm120"])
def test_export_onto_0_5_23_refuses_what_git_apply_refuses(repo_stack, topic, tmp_path):
    """The topic's first pinned patch does not apply to 0.5.23 (its sizing and its
    start-up resolution changed after v0.5.17: the oracle is plain git apply):
    the export says so, names it, and writes nothing."""
    lock, _ = repo_stack
    name, applies = first_patch_applies(release_trees.release_tree("0.5.23"), topic)
    assert applies is False, f"{name} applies to 0.5.23 with plain git apply"
    out = stack.export(ROOT, lock, topic, stack.Onto(version="0.5.23"), tmp_path / "pr", run_tests=False,
                       use_port=False)        # the pinned patches, even where patches/ports/v0.5.23/ has the topic
    assert out.status == "does-not-apply"
    first = out.patches[0]
    assert first.patch == name and first.status == "conflict", first
    assert first.failure["file"].startswith("python/sglang/") and first.failure["hunk"], first
    assert not (tmp_path / "pr").exists()          # nothing written for a series that does not apply


PORTS_0_5_23 = ROOT / "patches" / "ports" / "v0.5.23"


def _ports_oracle():
    """{pinned patch: port patch file} from the port files' `Ports:` lines and
    {pinned patch: series folder} from the series files' `# not ported:` lines,
    read with plain regexes (not the tool's parser)."""
    import re
    ported, not_ported = {}, {}
    for f in sorted(PORTS_0_5_23.glob("*/*.patch")):
        m = re.search(r"^Ports: (.+)$", f.read_text(), re.M)
        for name in re.split(r"[,\s]+", m.group(1).strip()) if m else []:
            ported[name] = f.relative_to(ROOT).as_posix()
    for f in sorted(PORTS_0_5_23.glob("*/series")):
        for name in re.findall(r"^# not ported: (\S+\.patch) ", f.read_text(), re.M):
            not_ported[name] = f.parent.relative_to(ROOT).as_posix()
    return ported, not_ported


def test_rebase_onto_0_5_23_names_the_real_ports():
    """`stack.py rebase --onto 0.5.23` on the repository's stack: every
    pinned patch of the four topics is `ported`, by the port patch whose
    `Ports:` line names it, or as dropped, except those a port series says it
    does not carry (`# not ported:`), which keep git's status with the
    reason beside it."""
    import json
    import sys
    oracle, not_ported = _ports_oracle()
    assert oracle, "no port in patches/ports/v0.5.23"
    topics = sorted(d.name for d in PORTS_0_5_23.iterdir() if (d / "series").is_file())
    assert topics == ["ddtree", "debug", "memory", "sm120"], topics
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "stack.py"), "rebase", "--onto", "0.5.23", "--json"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stderr                    # ported is not resolved: --write stays refused
    report = json.loads(p.stdout)
    assert {r["topic"] for r in report["patches"]} <= set(topics)
    for r in report["patches"]:
        if r["patch"] in not_ported:
            assert r["status"] != "ported" and r["patch"] not in oracle, r
            assert r["not_ported"]["port"] == not_ported[r["patch"]] and r["not_ported"]["not_ported"], r
        else:
            assert r["status"] == "ported", r
            assert r["ported"] == {"port": oracle[r["patch"]]} if r["patch"] in oracle else "dropped" in r["ported"], r
    assert report["ported"] == len(report["patches"]) - len(not_ported)


def _evidence_nodes(topic):
    """{port patch: its Evidence: node ids}, read from the files with a plain regex."""
    import re
    out = {}
    for line in (PORTS_0_5_23 / topic / "series").read_text().splitlines():
        name = line.split("#", 1)[0].strip()          # a line's comment (its applies: range) apart
        if name:
            m = re.search(r"^Evidence: (.+)$", (PORTS_0_5_23 / topic / name).read_text(), re.M)
            out[name] = m.group(1).split()
    return out


@pytest.mark.parametrize("topic", ["ddtree", "debug"])
def test_real_port_applies_and_its_evidence_holds(repo_stack, topic, tmp_path):
    """The repository's ddtree and debug ports on the real v0.5.23 (the debug
    one on the memory port, which it requires): every patch applies with strict
    git am, and every Evidence test fails before its patch and passes with it
    (export --check: nothing written)."""
    from tests.ddtree_integration.test_float32 import _kernel_deps

    if topic == "ddtree" and _kernel_deps():
        pytest.skip(f"the ddtree port's kernel evidence needs Triton's front end: {_kernel_deps()}")
    lock, _ = repo_stack
    out = stack.export(ROOT, lock, topic, stack.Onto(version="0.5.23"), tmp_path / "pr", check_only=True)
    assert out.status == "checked", (out.status, out.failed, out.warnings)
    assert not (tmp_path / "pr").exists()
    memory = len(_evidence_nodes("memory"))
    assert list(out.requires or ()) == ([{"topic": "memory", "patches": memory}] if topic == "debug" else [])
    nodes = _evidence_nodes(topic)
    assert [p.patch for p in out.patches] == list(nodes)
    for p in out.patches:
        assert p.status == "applied", p
        got = {t["node"]: t["verdict"] for t in p.evidence["tests"]}
        assert got == {n: "fails on pristine, passes patched" for n in nodes[p.patch]}, (p.patch, got)


def test_3way_takes_the_preimage_from_the_old_stack_where_index_lines_are_stale(repo_stack, tmp_path):
    """memory-ledger.patch's index lines name blobs of an earlier export of the
    memory patches (refresh keeps index lines as noise), so plain `git am
    --3way` of the file cannot build its merge base on v0.5.23 + the memory
    port ("could not build fake ancestor"): a port session would stop with no
    conflict to resolve.  attempt() then merges the old stack's own commit of
    the patch (OLD~(n - i), re-exported), and the conflict is in the files, with
    markers, for a person to resolve."""
    import dataclasses
    import re

    from sgl_overlay import builder, gitcmd
    import importlib

    from sgl_overlay.stack import ports
    rebase_mod = importlib.import_module("sgl_overlay.stack.rebase")   # the module (stack.rebase is its function)

    lock, st = repo_stack
    ledger = next(p for p in st.patches if p.name == "memory-ledger.patch")
    tree = tmp_path / "tree"
    rebase_mod.prepare_tree(lock, st, stack.Onto(version="0.5.23"), tree)
    blobs = re.findall(r"^index ([0-9a-f]+)\.\.", ledger.raw.decode(), re.M)
    if not [b for b in blobs if gitcmd.run(tree, "cat-file", "-e", b, check=False).returncode]:
        # refreshed since (its index lines name blobs of the stack now): the state an earlier export leaves,
        # made here, index lines naming preimages no tree has
        raw = re.sub(r"^index [0-9a-f]+\.\.", "index 1234567..", ledger.raw.decode(), flags=re.M)
        (tmp_path / ledger.path.name).write_text(raw)
        ledger = dataclasses.replace(ledger, path=tmp_path / ledger.path.name, raw=raw.encode())
    blobs = re.findall(r"^index ([0-9a-f]+)\.\.", ledger.raw.decode(), re.M)
    stale = [b for b in blobs if gitcmd.run(tree, "cat-file", "-e", b, check=False).returncode]
    assert stale, ("memory-ledger.patch's index lines all name blobs of the stack now (refreshed?): "
                   "this test's premise is gone; make a patch with stale index lines for it")
    memory = ports.load(PORTS_0_5_23 / "memory")
    for p in memory.patches:
        assert builder.apply_patch(tree, p, len(memory.patches)) is None, p.name
    head = gitcmd.out(tree, "rev-parse", "HEAD")
    # the control: the patch file alone gives git no merge base
    plain = gitcmd.run(tree, "am", "--3way", str(ledger.path), check=False)
    assert plain.returncode and "could not build fake ancestor" in plain.stdout + plain.stderr, plain.stderr
    gitcmd.run(tree, "am", "--abort", check=False)
    assert gitcmd.out(tree, "rev-parse", "HEAD") == head
    a = rebase_mod.attempt(tree, ledger, len(st.patches), keep_conflict=True)
    assert a.status == stack.Status.CONFLICT and a.stopped, a
    touched = {pf.path for pf in ledger.patchset}
    assert a.conflicted and set(a.conflicted) <= touched, (a.conflicted, touched)
    for f in a.conflicted:
        assert "\n<<<<<<< " in "\n" + (tree / f).read_text(), f
