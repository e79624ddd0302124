"""tools/stack.py port --topic T --onto VERSION: the port session for one
topic, onto the real v0.5.23 (its verified release artifact, through the
tests' cache; no --repo), without moving the pin.

The topic is this repository's debug instrumentation, memory-ledger.patch:
its port series (patches/ports/v0.5.23/debug) requires the memory port
(`Requires: memory`), so the session applies patches/ports/v0.5.23/memory
first, strictly; the pinned patch then conflicts for real on
kv_cache_configurator.py and memory_budget.py (v0.5.23 reworked the
configurator the ledger hooks into; docs/stack.md).  The resolution the
tests commit is the one the project made by hand: the files as the existing
port patch has them.  A scratch checkout holds the repository's patches/,
upstream.lock, overlay/ and the evidence files the port series name.
"""
import dataclasses
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_overlay import gitcmd, series
from sgl_overlay.stack import port, ports
from tests.apply.support import ROOT
from tests.stack.test_port_session import KILLER, git, hashes, upstream  # noqa: F401 (a fixture)

STACK = ROOT / "tools" / "stack.py"
TOPIC = "debug"
LEDGER = "memory-ledger.patch"
PORT = Path("patches/ports/v0.5.23/debug")
OLD_PORT = ROOT / PORT / LEDGER
CONFLICTED = ["python/sglang/srt/mem_cache/kv_cache_configurator.py",
              "python/sglang/srt/model_executor/memory_budget.py"]
UPSTREAM_TEST = "test/registered/unit/model_executor/test_memory_ledger_file.py"


# --------------------------------------------------------------------------
# a checkout, and the oracles (plain git and regexes, apart from the tool)

def make_checkout(dest):
    dest.mkdir(parents=True)
    for name in ("patches", "overlay"):
        shutil.copytree(ROOT / name, dest / name)
    shutil.copy(ROOT / "upstream.lock", dest / "upstream.lock")
    for f in sorted((ROOT / "patches" / "ports").glob("*/*/*.patch")):
        m = re.search(r"^Evidence: (.+)$", f.read_text(), re.M)
        for node in m.group(1).split() if m else []:
            path = node.split("::")[0]
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, dest / path)
    return dest


def pin(root):
    """The pin: every file of patches/ outside patches/ports, and upstream.lock."""
    return {k: v for k, v in hashes(root).items() if not k.startswith("patches/ports/")}


def folder(root, rel=PORT.parent):
    return {k: v for k, v in hashes(root).items() if k.startswith(rel.as_posix() + "/")}


def patch_id(path):
    p = subprocess.run(["git", "patch-id", "--stable"], input=Path(path).read_bytes(), capture_output=True)
    return p.stdout.split()[0].decode()


def trailer(path, name):
    m = re.search(rf"^{name}: (.+)$", Path(path).read_text(), re.M)
    return m.group(1) if m else None


def run(root, *args, timeout=900):
    # run from a folder that holds no test folder (as test_port_session.run)
    p = subprocess.run([sys.executable, str(STACK), "port", *args, "--root", str(root)], capture_output=True,
                       text=True, timeout=timeout, cwd=Path(__file__).parent)
    p.data = json.loads(p.stdout) if "--json" in args and p.stdout.strip().startswith("{") else None
    return p


def start(root, *more):
    # the checkout holds the repository's debug port: the session replaces it (--replace)
    return run(root, "--topic", TOPIC, "--onto", "0.5.23", "--replace", *more)


def tree_of(root):
    return root / "build" / "port" / "tree"


def resolve_as_the_port_did(tree, with_test=True):
    """The conflicted files as the existing port patch makes them (it applies
    strictly on v0.5.23 + the memory port, the stop's HEAD); with_test: its
    upstream-style test file too."""
    git(tree, "checkout", "HEAD", "--", *CONFLICTED)
    git(tree, "apply", "--index", *([] if with_test else [f"--include={f}" for f in CONFLICTED]), str(OLD_PORT))


@pytest.fixture
def stopped(tmp_path):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    r = start(root)
    assert r.returncode == 1, r.stdout + r.stderr
    return root, before, r


# --------------------------------------------------------------------------
# the session on the real v0.5.23

def test_stops_at_the_real_conflict_and_continue_writes_the_port_series(stopped):
    root, before, r = stopped
    out, tree = r.stdout, tree_of(root)
    assert out.splitlines()[0] == (f"port topic debug of v0.5.17 -> v0.5.23 on the memory port (4), to "
                                   f"{PORT.as_posix()}/ ({root / 'build' / 'port'}): stopped")
    assert f"{LEDGER}" in out and "conflict: waiting for you" in out
    assert f"file: {CONFLICTED[0]}" in out and "context not found:" in out and "nearest place:" in out
    assert "\n".join(f"  {f}" for f in CONFLICTED) in out
    assert "git am (required patches/ports/v0.5.23/memory) 4/4" in r.stderr
    assert "patch 1/1 memory-ledger.patch: conflict, stopped for you" in r.stderr
    for f in CONFLICTED:
        assert "\n<<<<<<< " in "\n" + (tree / f).read_text(), f
    assert hashes(root) == before                            # nothing written at a stop
    st = run(root, "--status", "--json")
    assert st.returncode == 1 and st.data["phase"] == "stopped" and st.data["topic"] == TOPIC
    assert st.data["requires"] == [{"topic": "memory", "patches": 4}]
    assert st.data["stop"]["patch"] == LEDGER and st.data["stop"]["conflicted"] == CONFLICTED
    # the memory port is the base the patch stopped on: HEAD is v0.5.23 + its four patches
    assert gitcmd.out(tree, "rev-list", "--count", "upstream..HEAD") == "4"

    c = run(root, "--continue")
    assert c.returncode == 2 and CONFLICTED[0] in c.stderr and "unmerged" in c.stderr
    resolve_as_the_port_did(tree)
    git(tree, "commit", "-q", "-C", st.data["stop"]["old_commit"])      # committed, git am's state left
    assert hashes(root) == before
    done = run(root, "--continue")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "patches/ports/v0.5.23/debug/: 1 rewritten, 0 added, 0 removed, 0 unchanged, 0 not ported; " \
           "patches/ and upstream.lock untouched (the pin stays v0.5.17)" in done.stdout
    new = root / PORT / LEDGER
    # the change is the port's (git's own patch-id), the message the pinned patch's, the trailers carried
    assert patch_id(new) == patch_id(OLD_PORT)
    assert trailer(new, "Subject") == trailer(ROOT / "patches" / LEDGER, "Subject")
    assert trailer(new, "Ports") == LEDGER and trailer(new, "Requires") == "memory"
    assert trailer(new, "Evidence") == trailer(OLD_PORT, "Evidence")
    assert (root / PORT / "series").read_bytes() == (ROOT / PORT / "series").read_bytes()
    # the pin and the other port series byte for byte; the checkout lints clean
    assert pin(root) == pin(ROOT) and pin(root) == {k: v for k, v in before.items() if k in pin(root)}
    others = {k: v for k, v in folder(root).items() if not k.startswith(PORT.as_posix())}
    assert others == {k: v for k, v in before.items() if k in others} and len(others) >= 8
    lint = subprocess.run([sys.executable, str(STACK), "lint", "--root", str(root)], capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout
    # the range-diff of the pinned patch (its place in the series) against the port patch (1st since the memory port)
    s = run(root, "--status", "--json").data
    assert s["status"] == "finished" and s["written"]["rewritten"] == [LEDGER] and "lock" not in s
    (p,) = s["patches"]
    assert p["resolution"] == "person" and p["change"] == "rewritten"
    nth = series.read_series(ROOT / "patches").index(LEDGER) + 1   # the pinned patch's place in the series
    assert p["range_diff"][0].lstrip().startswith(f"{nth}:") and " ! " in p["range_diff"][0]
    assert any(UPSTREAM_TEST in line for line in p["range_diff"])
    assert p["range_diff"][0] in done.stdout
    assert p["range_diff"][0] in (root / "build" / "port" / "range-diff.txt").read_text()


def test_skip_records_the_not_ported_reason_in_the_port_series(stopped):
    root, before, _ = stopped
    p = run(root, "--skip")
    assert p.returncode == 2 and "--reason" in p.stderr and "# not ported" in p.stderr
    reason = "v0.5.23's configurator sizes the pools in one pass; the ledger would need a new hook"
    p = run(root, "--skip", "--reason", reason, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.data["patches"][0]["resolution"] == "skipped" and p.data["patches"][0]["reason"] == reason
    assert p.data["written"]["removed"] == [LEDGER]
    assert p.data["written"]["dropped"] == [{"patch": LEDGER, "reason": reason}]
    d = root / PORT
    assert not (d / LEDGER).exists()
    text = (d / "series").read_text()
    said = re.findall(r"^# not ported: (\S+) -- (.+(?:\n#   .+)*)", text, re.M)
    assert [(n, " ".join(r.replace("\n#   ", " ").split())) for n, r in said] == [(LEDGER, reason)]
    assert not [l for l in text.splitlines() if l and not l.startswith("#")]      # no entry left
    assert ports.not_ported(d) == [(LEDGER, reason)]
    assert pin(root) == {k: v for k, v in before.items() if k in pin(root)}
    lint = subprocess.run([sys.executable, str(STACK), "lint", "--root", str(root)], capture_output=True,
                          text=True)
    assert lint.returncode == 0, lint.stdout


def test_abort_leaves_patches_ports_byte_for_byte_and_a_second_run_reuses_the_resolution(stopped):
    root, before, _ = stopped
    again = start(root)
    assert again.returncode == 2 and "a topic port of debug onto v0.5.23 is already in" in again.stderr
    whole = run(root, "--onto", "0.5.23")
    assert whole.returncode == 2 and "already in" in whole.stderr
    # only the conflicted files resolved and staged: --abort records the resolution
    resolve_as_the_port_did(tree_of(root), with_test=False)
    a = run(root, "--abort", "--json")
    assert a.returncode == 0 and a.data["status"] == "aborted", a.stderr
    assert hashes(root) == before                             # patches/, patches/ports/**, the lock
    assert not (root / "build" / "port").exists()
    assert list((root / "build" / "port-rr-cache").glob("*/postimage"))

    r = start(root)
    assert r.returncode == 0, r.stdout + r.stderr             # no stop
    assert f"{LEDGER}: conflict, resolution reused (rerere)" in r.stderr
    s = run(root, "--status", "--json").data
    assert s["patches"][0]["resolution"] == "rerere" and s["patches"][0]["reused"] is True
    new = (root / PORT / LEDGER).read_text()
    old = OLD_PORT.read_text()
    for f in CONFLICTED:           # each file's change is the port's: its diff section, as git writes it
        section = re.compile(rf"^diff --git a/{re.escape(f)} .*?(?=^diff --git |\Z)", re.M | re.S)
        strip = lambda t: re.sub(r"^(index .*|@@ .*?@@)", "", t, flags=re.M)   # noqa: E731
        assert strip(section.search(new).group(0)) == strip(section.search(old).group(0)), f
    assert UPSTREAM_TEST not in new                           # recorded for the conflicted files only
    assert pin(root) == {k: v for k, v in before.items() if k in pin(root)}


POINTS = ("staged", "finishing", "swapped", "done")


def test_killed_at_each_step_of_the_finish_leaves_the_port_folder_whole(stopped, tmp_path):
    root, before, _ = stopped
    resolve_as_the_port_did(tree_of(root))                    # staged: --continue runs git am --continue
    ref = tmp_path / "reference"
    shutil.copytree(root, ref, symlinks=True)
    assert run(ref, "--continue").returncode == 0

    def normalized(r):            # the From <commit> line changes with the time git am ran; nothing else does
        return {k: hashlib.sha256(re.sub(rb"^From [0-9a-f]{40} ", b"From ", (r / k).read_bytes()))
                .hexdigest() for k in folder(r, PORT)}
    old, new = normalized(root), normalized(ref)
    assert old != new
    seen = {}
    for point in POINTS:
        k = subprocess.run([sys.executable, "-c", KILLER, point, str(root)], capture_output=True, text=True,
                           timeout=600)
        assert k.returncode == -9, (point, k.returncode, k.stderr)
        now = normalized(root)
        assert now in (old, new), point                       # the port folder entirely old or entirely new
        phase = json.loads((root / "build" / "port" / "session.json").read_text())["phase"]
        seen[point] = ("new" if now == new else "old") + f", {phase}"
        assert pin(root) == {k: v for k, v in before.items() if k in pin(root)}, point
    assert seen == {"staged": "old, applying", "finishing": "old, finishing", "swapped": "new, finishing",
                    "done": "new, done"}
    assert run(root, "--continue").returncode == 0 and normalized(root) == new


def test_a_commit_of_repo_gets_a_folder_named_by_it(tmp_path, upstream):  # noqa: F811
    """--onto COMMIT --repo: the tests' upstream whose tag v0.5.17 holds the
    pin's own tree, so the sm120 patches apply strictly; the folder is named
    by the commit's 12 digits, each mail carries its pinned patch's change
    and names it in Ports:, and the lint findings of a first port (no
    Evidence: yet, no upstream-style test) are reported, not hidden."""
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    commit = gitcmd.out(upstream, "rev-parse", "v0.5.17^{commit}")
    r = run(root, "--topic", "sm120", "--onto", commit, "--repo", str(upstream), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.data["label"] == commit[:12] and r.data["port"] == f"patches/ports/{commit[:12]}/sm120"
    d = root / "patches" / "ports" / commit[:12] / "sm120"
    names = ["sm120-communication.patch", "sm120-kernel-tables.patch", "sm120-startup-defaults.patch"]
    assert [e for l in (d / "series").read_text().splitlines() if (e := l.split("#", 1)[0].strip())] == names
    assert r.data["written"]["added"] == names
    for n in names:
        assert patch_id(d / n) == patch_id(ROOT / "patches" / n), n
        assert trailer(d / n, "Ports") == n and trailer(d / n, "Evidence") is None
    assert any("missing trailer 'Evidence:'" in f["error"] for f in r.data["lint"])
    assert {k: v for k, v in hashes(root).items() if k in before} == before      # nothing else written


# --------------------------------------------------------------------------
# bad input, before any work

def test_bad_input_is_refused_before_any_work(tmp_path):
    root = make_checkout(tmp_path / "proj")
    before = hashes(root)
    for args, words in [
        (["--topic", "nosuch", "--onto", "0.5.23"], "no patch of"),
        (["--topic", "debug", "--continue"], "--topic goes with --onto"),
        (["--topic", "debug", "--status"], "--topic goes with --onto"),
        (["--topic", "debug", "--onto", "0123456789ab"], "not a release version"),
        (["--topic", "debug", "--onto", "9.9.9"], "sglang 9.9.9 is not a published release"),
        (["--replace", "--status"], "--replace goes with --topic"),
        # the repository's debug port is there: replacing it takes --replace
        (["--topic", "debug", "--onto", "0.5.23"], f"{PORT.as_posix()}/ already holds a port series"),
    ]:
        p = run(root, *args)
        assert p.returncode == 2 and words in p.stderr, (args, p.stderr)
    p = run(root, "--topic", "nosuch", "--onto", "0.5.23")
    assert "Topic: nosuch" in p.stderr and "sm120, memory, debug, ddtree" in p.stderr
    # the port folder with uncommitted changes: its end would rewrite them
    gitcmd.run(root, "init", "-q")
    gitcmd.run(root, "add", "-A")
    gitcmd.run(root, "commit", "-q", "-m", "checkout")
    series_file = root / PORT / "series"
    series_file.write_text(series_file.read_text() + "# a note\n")
    p = run(root, "--topic", "debug", "--onto", "0.5.23", "--replace")
    assert p.returncode == 2 and f"uncommitted changes in {PORT.as_posix()}/series" in p.stderr, p.stderr
    assert "commit them" in p.stderr
    series_file.write_text((ROOT / PORT / "series").read_text())
    assert hashes(root) == before and not (root / "build" / "port").exists()


# --------------------------------------------------------------------------
# the pure parts

def test_port_mails_names_and_trailers():
    from sgl_overlay import series
    stack = series.load(ROOT)
    sm120 = ports.load(ROOT / "patches" / "ports" / "v0.5.23" / "sm120")
    s = port.Session(onto="0.5.23", repo="", old_version="0.5.17", lock_digest="L", patches_digest="P",
                     new_lock_digest="", new_base="b", merged={}, phase=port.Phase.FINISHING, head="h",
                     topic="sm120", ports_label="v0.5.23")
    carried = [("sm120-communication.patch", port.Carried("sm120-communication.patch", "1" * 40, "a")),
               ("sm120-communication.patch", port.Carried("sm120-one-more.patch", "2" * 40, "b")),
               ("sm120-kernel-tables.patch", port.Carried("sm120-kernel-tables.patch", "3" * 40, "c"))]
    got = port.port_mails(s, stack, carried, sm120)
    old = {q.name: q for q in sm120.patches}
    fusion, pdmux = old["sm120-allreduce-fusion-off.patch"], old["sm120-pdmux-green-context.patch"]
    assert got == [
        ("sm120-allreduce-fusion-off.patch", [("Ports", "sm120-communication.patch"), ("Requires", ""),
                                              ("Evidence", fusion.trailers["Evidence"])]),
        ("sm120-one-more.patch", [("Ports", "sm120-communication.patch"), ("Requires", ""),
                                  ("Evidence", fusion.trailers["Evidence"])]),
        ("sm120-pdmux-green-context.patch", [("Ports", "sm120-kernel-tables.patch"), ("Requires", ""),
                                             ("Evidence", pdmux.trailers["Evidence"])])]
    # no old port: the pinned patch's own trailers; the series applied first named on the first patch
    debug = port.port_mails(dataclasses.replace(s, topic="debug", requires=(("memory", 4),)), stack,
                            [(LEDGER, port.Carried(LEDGER, "1" * 40, "a"))], None)
    assert debug == [(LEDGER, [("Ports", LEDGER), ("Requires", "memory"), ("Evidence", "")])]


def test_add_trailers_and_not_ported_comments():
    from sgl_overlay.stack.texts import add_trailers
    mail = ("From 1 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] x\n\nWhy.\n\nTopic: t\nPorts: kept.patch\n"
            "---\n a | 1 +\n\ndiff --git a/a b/a\n")
    got = add_trailers(mail, [("Ports", "x.patch"), ("Requires", ""), ("Evidence", "tests/t.py::test_a")])
    assert got == mail.replace("Ports: kept.patch\n", "Ports: kept.patch\nEvidence: tests/t.py::test_a\n")
    assert add_trailers(mail, [("Ports", "y.patch")]) == mail
    bare = "Subject: [PATCH] x\n\nWhy.\n---\n a | 1 +\n"
    assert add_trailers(bare, [("Ports", "x.patch")]) == "Subject: [PATCH] x\n\nWhy.\n\nPorts: x.patch\n---\n a | 1 +\n"
    series_text = "# head\n# not ported: a.patch -- old\n#   reason\nb.patch\n# note\nc.patch\n"
    assert ports.with_not_ported(series_text, [("d.patch", "why")]) == \
        "# head\n# not ported: d.patch -- why\nb.patch\n# note\nc.patch\n"
    assert ports.with_not_ported("# head\n", [("d.patch", "why")]) == "# head\n# not ported: d.patch -- why\n"


def test_finish_steps_of_a_topic_port():
    s = port.Session(onto="0.5.23", repo="", old_version="0.5.17", lock_digest="L0", patches_digest="P0",
                     new_lock_digest="", new_base="b", merged={}, phase=port.Phase.FINISHING, head="h",
                     staged=port.Staged("T1", "L0", ()), topic="debug", ports_label="v0.5.23", ports_digest="T0")
    assert port.finish_steps(s, "T0", "L0", "T1", "L0") == (port.Put.SWAP_PATCHES,)
    assert port.finish_steps(s, None, "L0", "T1", "L0") == (port.Put.SWAP_PATCHES,)     # a new port folder
    assert port.finish_steps(s, "T1", "L0", "T0", "L0") == ()
    for now in (("T9", "L0", "T1", "L0"), ("T0", "L9", "T1", "L0"), ("T0", "L0", "T9", "L0")):
        refused = port.finish_steps(s, *now)
        assert isinstance(refused, port.Refusal) and refused.integrity, now
    assert "patches/ports/v0.5.23/debug/" in port.finish_steps(s, "T9", "L0", "T1", "L0").message
    # a session file of before topic ports reads as a whole-stack one
    d = s.to_json()
    for k in ("topic", "ports_label", "base", "requires", "ports_digest"):
        d.pop(k)
    old = port.Session.from_json(d)
    assert old.topic == "" and old.base == "upstream" and old.target == "patches/" and old.label == "v0.5.23"
