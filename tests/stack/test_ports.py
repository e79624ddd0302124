"""Ported series (patches/ports/<label>/<topic>/) on the real v0.5.23
release: export with the evidence really run, rebase's `ported` status,
lint.

The port built here is small but real: v0.5.23's
sglang/srt/utils/flatten.py checks that the idx and val columns of
flatten_ragged agree with `assert`, which `python -O` compiles away (the
mismatch then passes silently and token ids shift on the wire).  Patch 1
turns the position-count check into a ValueError, patch 2 the per-position
length check, and adds an upstream-style unit test
(test/registered/unit/utils/, SGLang's layout at that release).  The
evidence tests (tests/ragged/ in a scratch project) run the tree's real
flatten.py under -O."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apply.support import POOL, ROOT, PatchMaker
from sgl_overlay import base_tree, gitcmd, stack
from sgl_overlay.stack import evidence, ports

STACK = ROOT / "tools" / "stack.py"
DATA = Path(__file__).parent / "port_data"
FLATTEN = "python/sglang/srt/utils/flatten.py"
HOOKS = "python/sglang/srt/model_executor/hook_manager.py"
# a line of the pin's pool_configurator.py that v0.5.23 reworked (its deepseek_v4 imports)
RING_IMPORT = "from sglang.srt.mem_cache.deepseek_v4_memory_pool import get_compress_state_ring_size\n"
UPSTREAM_TEST = "test/registered/unit/utils/test_flatten.py"
EVIDENCE = "tests/ragged/test_flatten_port.py"
PORT = "patches/ports/v0.5.23/ragged"
OUTER = (
    "    assert per_pos_idx is not None and len(per_pos_idx) == len(per_pos_val), (\n"
    "        f\"ragged idx column has {len(per_pos_idx) if per_pos_idx else 0} \"\n"
    "        f\"positions, val column has {len(per_pos_val)}\"\n"
    "    )\n",
    "    if per_pos_idx is None or len(per_pos_idx) != len(per_pos_val):\n"
    "        raise ValueError(\n"
    "            f\"ragged idx column has {len(per_pos_idx) if per_pos_idx else 0} \"\n"
    "            f\"positions, val column has {len(per_pos_val)}\"\n"
    "        )\n")
INNER = (
    "            assert pi is not None and len(pi) == len(pv), (\n"
    "                f\"position {p}: idx len \"\n"
    "                f\"{len(pi) if pi is not None else None} != val len {len(pv)}\"\n"
    "            )\n",
    "            if pi is None or len(pi) != len(pv):\n"
    "                raise ValueError(\n"
    "                    f\"position {p}: idx len \"\n"
    "                    f\"{len(pi) if pi is not None else None} != val len {len(pv)}\"\n"
    "                )\n")
DROPPED = "Dropped: nsa.patch — upstream already does this in v0.5.23 (pool_configurator's imports reworked)."


def trailers(ports_, evidence_):
    return (f"Topic: ragged\nUpstream-Status: Pending\nPorts: {ports_}\n"
            f"Evidence: {' '.join(EVIDENCE + '::' + t for t in evidence_)}\n")


@pytest.fixture(scope="module")
def port_patches(tmp_path_factory):
    """The two port patches, git format-patch mails made against the real
    v0.5.23 release tree."""
    d = tmp_path_factory.mktemp("v0.5.23")
    base_tree.base_from_release("0.5.23", d / "base")
    maker = PatchMaker(d / "base", d / "scratch")
    one, c1 = maker.make([(FLATTEN, *OUTER)], subject="flatten_ragged: refuse a position-count mismatch with ValueError",
                         body="The check is an assert, compiled away under python -O: the mismatch then passes\n"
                              "silently and the wire pairs the buffers wrongly.",
                         trailers=trailers("kept.patch", ["test_outer_mismatch_refused_under_O"]))
    two, _ = maker.make([(FLATTEN, *INNER), (UPSTREAM_TEST, None, (DATA / "upstream_test_flatten.py.in").read_text())],
                        subject="flatten_ragged: refuse a per-position length mismatch with ValueError",
                        body="The same for each position's idx/val pair, with a unit test.\n\n" + DROPPED,
                        trailers=trailers("kept.patch", ["test_inner_mismatch_refused_under_O",
                                                         "test_matched_columns_flatten"]), on=c1)
    return {"base": d / "base", "one.patch": one, "two.patch": two}


@pytest.fixture
def ported(project, patches, port_patches):
    """A scratch project: a pinned topic `ragged` (kept.patch, nsa.patch on
    real files of the pin), another topic, its port to v0.5.23, the
    evidence tests and the repository's tests/conftest.py (--tree)."""
    kept, c1 = patches.make([(HOOKS, "import fnmatch\n", "import fnmatch  # kept\n")], subject="Kept",
                            trailers="Upstream-Status: Pending\nTopic: ragged\n")
    nsa, _ = patches.make([(POOL, RING_IMPORT, RING_IMPORT.replace("\n", "  # ours\n"))], subject="Nsa",
                          trailers="Upstream-Status: Pending\nTopic: ragged\n")
    other, _ = patches.make([(HOOKS, "import logging\n", "import logging  # other\n")], subject="Other",
                            trailers="Upstream-Status: Pending\nTopic: other\n", on=c1)
    project.series(["kept.patch", "nsa.patch", "other.patch"],
                   {"kept.patch": kept, "nsa.patch": nsa, "other.patch": other})
    write_port(project.root, {"one.patch": port_patches["one.patch"], "two.patch": port_patches["two.patch"]})
    (project.root / "tests" / "ragged").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", project.root / "tests" / "conftest.py")
    shutil.copy(DATA / "evidence_flatten.py.in", project.root / EVIDENCE)
    return project


def write_port(root, files):
    d = root / PORT
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text)
    (d / "series").write_text("# the ragged topic on v0.5.23\n" + "".join(f"{n}\n" for n in files))


def run(project, *args):
    p = subprocess.run([sys.executable, str(STACK), *args, "--root", str(project.root)],
                       capture_output=True, text=True, timeout=900)
    p.data = json.loads(p.stdout) if "--json" in args and p.stdout.strip().startswith("{") else None
    return p


def test_export_of_a_port_applies_and_runs_the_evidence(ported, port_patches, tmp_path):
    out = tmp_path / "pr"
    r = run(ported, "export", "--topic", "ragged", "--onto", "0.5.23", "--out", str(out), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = r.data
    assert d["status"] == "exported" and d["port"] == PORT, d
    assert [p["status"] for p in d["patches"]] == ["applied", "applied"]
    assert d["patches"][1]["dropped"] == [{"patch": "nsa.patch", "reason": DROPPED[len("Dropped: nsa.patch — "):]}]
    ev1, ev2 = (p["evidence"] for p in d["patches"])
    # patch 1: fails on v0.5.23, passes with patch 1
    (t,) = ev1["tests"]
    assert (t["before"], t["after"], t["verdict"]) == ("failed", "passed", "fails on pristine, passes patched")
    assert ev1["runs"]["before"]["exit"] == 1 and ev1["runs"]["after"]["exit"] == 0
    # why it fails on pristine: v0.5.23 under -O flattens the first position and drops the second idx one
    assert (t["before_reason"], t["after_reason"]) == ("AssertionError: ([0.5], [7], [1])", "")
    assert ev1["runs"]["before"]["command"].endswith("--tree <v0.5.23>")
    # patch 2: "before" is v0.5.23 + patch 1, where the per-position assert still vanishes under -O
    inner, matched = ev2["tests"]
    assert (inner["before"], inner["after"], inner["verdict"]) == \
        ("failed", "passed", "fails on pristine, passes patched")
    assert inner["before_reason"] == "AssertionError: ([0.5, 0.25], [7], [2])"     # two values, one token id
    assert ev2["runs"]["before"]["command"].endswith("--tree <v0.5.23 + patches 1..1>")
    assert ev2["runs"]["after"]["command"].endswith("--tree <v0.5.23 + patches 1..2>")
    # well-formed columns flatten on pristine too: reported, not hidden
    assert (matched["before"], matched["after"], matched["verdict"]) == \
        ("passed", "passed", "does not fail on pristine")
    assert any("test_matched_columns_flatten does not fail on pristine" in w for w in d["warnings"])
    # the upstream-style unit test: run unless this interpreter lacks SGLang's dependencies
    (u,) = d["upstream_tests"]
    assert u["file"] == UPSTREAM_TEST and u["index"] == 2
    lacks = u["patched"].get("missing_module")
    if lacks:
        assert importlib.util.find_spec(lacks.split(".")[0]) is None, lacks
        assert u["verdict"] == "not run" and any(lacks in w for w in d["warnings"])
    else:
        assert (u["pristine"]["outcome"], u["patched"]["outcome"]) == ("failed", "passed")
    # the mails: numbered, downstream trailers gone, and plain git am applies them to v0.5.23
    files = sorted(f.name for f in out.iterdir())
    assert files == ["0001-flatten-ragged-refuse-a-position-count.patch",
                     "0002-flatten-ragged-refuse-a-per-position.patch", "pull-request.md"]
    for name, n in zip(files[:2], (1, 2)):
        mail = (out / name).read_text()
        assert f"Subject: [PATCH {n}/2] flatten_ragged" in mail
        assert "\n\n---\n" not in mail                 # the message ends where the trailers were
        for trailer in ("Topic:", "Upstream-Status:", "Ports:", "Evidence:"):
            assert trailer not in mail.split("\n---\n")[0], (name, trailer)
    check = tmp_path / "check"
    gitcmd.run(None, "clone", "--quiet", "--branch", "upstream", str(port_patches["base"]), str(check))
    gitcmd.run(check, "am", "--quiet", *[str(out / f) for f in files[:2]])
    assert "raise ValueError(" in (check / FLATTEN).read_text()
    assert (check / UPSTREAM_TEST).read_text() == (DATA / "upstream_test_flatten.py.in").read_text()
    pr = (out / "pull-request.md").read_text()
    assert "# ragged: 2 change(s) for SGLang v0.5.23" in pr
    assert f"| `{EVIDENCE}::test_matched_columns_flatten` | passed | passed | does not fail on pristine |" in pr
    assert f"| `{EVIDENCE}::test_outer_mismatch_refused_under_O` | failed: `AssertionError: ([0.5], [7], [1])` | " \
           "passed | fails on pristine, passes patched |" in pr
    assert f"`python -m pytest {EVIDENCE}::test_outer_mismatch_refused_under_O --tree <v0.5.23>` → exit 1" in pr
    assert f"`PYTHONPATH=python python -m pytest {UPSTREAM_TEST}`" in pr


def test_an_evidence_test_that_fails_patched_stops_the_export(ported, port_patches, tmp_path):
    """Patch 1 alone does not make the per-position check survive -O: with
    that test named as its evidence, the export says tests-fail (exit 1)
    and writes nothing."""
    one = port_patches["one.patch"].replace("::test_outer_mismatch_refused_under_O",
                                            "::test_outer_mismatch_refused_under_O "
                                            f"{EVIDENCE}::test_inner_mismatch_refused_under_O")
    write_port(ported.root, {"one.patch": one})
    out = tmp_path / "pr"
    r = run(ported, "export", "--topic", "ragged", "--onto", "0.5.23", "--out", str(out), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.data["status"] == "tests-fail"
    assert r.data["failed"] == [f"{EVIDENCE}::test_inner_mismatch_refused_under_O"]
    verdicts = {t["node"].split("::")[1]: t["verdict"] for t in r.data["patches"][0]["evidence"]["tests"]}
    assert verdicts == {"test_outer_mismatch_refused_under_O": "fails on pristine, passes patched",
                        "test_inner_mismatch_refused_under_O": "fails patched"}
    assert not out.exists()


def test_export_of_a_port_that_does_not_apply(ported, port_patches, tmp_path):
    """A port patch whose context is not v0.5.23's: strict git am refuses
    it, the export names the file and writes nothing (exit 1)."""
    bad = port_patches["one.patch"].replace("\n     for p, pv in enumerate(per_pos_val):\n",
                                            "\n     for p, pv in enumerate(per_pos_val, 1):\n")
    assert bad != port_patches["one.patch"]
    write_port(ported.root, {"one.patch": bad})
    r = run(ported, "export", "--topic", "ragged", "--onto", "0.5.23", "--out", str(tmp_path / "pr"), "--json")
    assert r.returncode == 1 and r.data["status"] == "does-not-apply", r.stdout + r.stderr
    assert r.data["patches"][0]["failure"]["file"] == FLATTEN
    assert not (tmp_path / "pr").exists()


def test_rebase_reports_what_the_port_covers(ported):
    r = run(ported, "rebase", "--onto", "0.5.23", "--json")
    assert r.returncode == 1, r.stderr
    got = {p["patch"]: p for p in r.data["patches"]}
    assert got["kept.patch"]["status"] == "ported"
    assert got["kept.patch"]["git_status"] == "applied"
    assert got["kept.patch"]["ported"] == {"port": f"{PORT}/two.patch"}
    assert got["nsa.patch"]["status"] == "ported" and got["nsa.patch"]["git_status"] == "conflict"
    assert got["nsa.patch"]["ported"]["dropped"].startswith("upstream already does this in v0.5.23")
    assert got["other.patch"]["status"] == "applied" and "ported" not in got["other.patch"]
    assert r.data["ported"] == 2
    text = run(ported, "rebase", "--onto", "0.5.23").stdout
    assert f"kept.patch" in text and f"ported by {PORT}/two.patch (git: applied)" in text
    assert "2 patch(es) covered by the ported series" in text


def lint(project):
    r = run(project, "lint", "--json")
    return r.returncode, sorted((p["field"], p["error"]) for p in r.data["problems"])


def test_lint_checks_the_ports(ported, port_patches):
    assert lint(ported) == (0, [])
    d = ported.root / PORT
    one, two = port_patches["one.patch"], port_patches["two.patch"]
    # Ports: names a patch that is not pinned, or one of another topic
    write_port(ported.root, {"one.patch": one.replace("Ports: kept.patch", "Ports: gone.patch"), "two.patch": two})
    rc, found = lint(ported)
    assert rc == 1 and [f for f, _ in found] == ["Ports"] and "'gone.patch'" in found[0][1]
    write_port(ported.root, {"one.patch": one.replace("Ports: kept.patch", "Ports: other.patch"), "two.patch": two})
    assert "of topic 'other'" in lint(ported)[1][0][1]
    # a pinned patch neither ported nor dropped
    write_port(ported.root, {"one.patch": one, "two.patch": two.replace(DROPPED, "")})
    rc, found = lint(ported)
    assert found == [("Ports", f"{PORT}: pinned patch(es) of topic 'ragged' not accounted for: nsa.patch")]
    # evidence that names no existing file or test; a missing trailer
    write_port(ported.root, {"one.patch": one.replace("::test_outer_mismatch", "::test_missing_outer"),
                             "two.patch": two.replace("tests/ragged/", "tests/nowhere/").replace(
                                 "Upstream-Status: Pending\n", "")})
    fields = [f for f, _ in lint(ported)[1]]
    assert fields == ["Evidence", "Evidence", "Evidence", "Upstream-Status"], lint(ported)
    # no upstream-style test in the series; series and folder disagree
    write_port(ported.root, {"one.patch": one.replace("kept.patch", "kept.patch, nsa.patch")})
    assert lint(ported)[1] == [("test", f"{PORT}: no patch adds an upstream-style test (test/.../test_*.py)")]
    (d / "stray.patch").write_text(one)
    assert "stray.patch is not in the series" in lint(ported)[1][0][1]
    # a folder that is neither a release tag nor a commit
    shutil.rmtree(ported.root / "patches" / "ports")
    (ported.root / "patches" / "ports" / "newest" / "ragged").mkdir(parents=True)
    assert lint(ported)[1][0][1].endswith("newest: not a release tag (v0.5.23) or a commit folder")


def test_export_refuses_a_missing_test_python(ported, tmp_path):
    r = run(ported, "export", "--topic", "ragged", "--onto", "0.5.23", "--out", str(tmp_path / "pr"),
            "--test-python", str(tmp_path / "no-python"))
    assert r.returncode == 2 and "--test-python" in r.stderr and "no-python" in r.stderr
    assert not (tmp_path / "pr").exists()


@pytest.mark.parametrize("node,key", [
    ("tests/a/test_b.py::test_c", ("tests.a.test_b", "test_c")),
    ("tests/a/test_b.py::TestC::test_d", ("tests.a.test_b.TestC", "test_d")),
    ("test/registered/unit/utils/test_flatten.py", ("test.registered.unit.utils.test_flatten", None)),
])
def test_node_key_is_junits_address(node, key):
    assert evidence.node_key(node) == key


@pytest.mark.parametrize("before,after,verdict", [
    ("failed", "passed", "fails on pristine, passes patched"),
    ("error", "passed", "fails on pristine, passes patched"),
    ("passed", "passed", "does not fail on pristine"),
    ("skipped", "passed", "does not fail on pristine"),
    ("failed", "failed", "fails patched"),
    ("failed", "skipped", "fails patched"),
    ("failed", "not-run", "fails patched"),
])
def test_verdict(before, after, verdict):
    assert evidence.verdict(before, after) == verdict


def test_dropped_sentences_are_read_across_lines():
    text = "Dropped: a.patch — upstream already does this in\nabc123 (#42).\nDropped: b.patch -- upstream " \
           "already does this in def456.\n\nTopic: x"
    assert [(m.group(1), " ".join(m.group(2).split())) for m in ports.DROPPED.finditer(text)] == [
        ("a.patch", "upstream already does this in abc123 (#42)."),
        ("b.patch", "upstream already does this in def456.")]


def test_export_pinned_ignores_the_port(ported, tmp_path):
    """--pinned exports the pinned patches (rebased) even where a port
    exists: nsa.patch conflicts on v0.5.23 as before the port."""
    r = run(ported, "export", "--topic", "ragged", "--onto", "0.5.23", "--out", str(tmp_path / "pr"),
            "--pinned", "--no-tests", "--json")
    assert r.returncode == 1 and r.data["status"] == "does-not-apply", r.stdout + r.stderr
    assert "port" not in r.data
    assert {p["patch"]: p["status"] for p in r.data["patches"]} == {"kept.patch": "applied", "nsa.patch": "conflict"}


# -- a port series that Requires another, and a topic marked Inappropriate ------

RAGDEBUG = "patches/ports/v0.5.23/ragdebug"
NAMED = ("                    f\"position {p}: idx len \"\n",
         "                    f\"ragged position {p}: idx len \"\n")
RAGDEBUG_EVIDENCE = "tests/ragged/test_named_port.py"
RAGDEBUG_TEST = '''from tests.ragged.test_flatten_port import flatten_under_O


def test_refusal_names_the_column_pair(patched_tree):
    got = flatten_under_O(patched_tree, [[0.5, 0.25]], [[7]])
    assert got.startswith("refused: ragged position 0:"), got
'''


@pytest.fixture(scope="module")
def ragdebug_patch(port_patches, tmp_path_factory):
    """A patch made on v0.5.23 + the ragged port (its line exists only there):
    Upstream-Status Inappropriate, Requires: ragged."""
    d = tmp_path_factory.mktemp("ragdebug")
    maker = PatchMaker(port_patches["base"], d / "scratch")
    gitcmd.run(maker.dir, "checkout", "--quiet", "--force", "upstream")     # git am needs the work tree
    for name in ("one.patch", "two.patch"):
        f = d / name
        f.write_text(port_patches[name])
        gitcmd.run(maker.dir, "am", "--quiet", str(f))
    on = gitcmd.out(maker.dir, "rev-parse", "HEAD")
    unit = ("import pytest\n\nfrom sglang.srt.utils.flatten import flatten_ragged\n\n\n"
            "def test_refusal_names_the_column_pair():\n"
            "    with pytest.raises(ValueError, match=\"ragged position 0\"):\n"
            "        flatten_ragged([[0.5, 0.25]], [[7]])\n")
    text, _ = maker.make([(FLATTEN, *NAMED), ("test/registered/unit/utils/test_flatten_named.py", None, unit)],
                         subject="debug: name the ragged columns in the refusal",
                         body="Instrumentation for our own logs; not for upstream.",
                         trailers="Topic: ragdebug\nUpstream-Status: Inappropriate [debug instrumentation]\n"
                                  "Ports: dbg.patch\nRequires: ragged\n"
                                  f"Evidence: {RAGDEBUG_EVIDENCE}::test_refusal_names_the_column_pair\n", on=on)
    return text


@pytest.fixture
def ported_debug(ported, patches, ragdebug_patch):
    """The scratch project with a pinned topic ragdebug (Inappropriate) and its
    port, which applies on the ragged port."""
    dbg, _ = patches.make([(HOOKS, "import fnmatch\n", "import fnmatch  # dbg\n")], subject="Dbg",
                          trailers="Upstream-Status: Inappropriate [debug]\nTopic: ragdebug\n")
    names = ["kept.patch", "nsa.patch", "other.patch", "dbg.patch"]
    ported.series(names, {"dbg.patch": dbg})
    d = ported.root / RAGDEBUG
    d.mkdir(parents=True)
    (d / "one.patch").write_text(ragdebug_patch)
    (d / "series").write_text("# ragdebug on v0.5.23, on the ragged port\none.patch\n")
    (ported.root / RAGDEBUG_EVIDENCE).write_text(RAGDEBUG_TEST)
    (ported.root / "tests" / "ragged" / "__init__.py").touch()
    (ported.root / "tests" / "__init__.py").touch()
    return ported


def test_export_refuses_an_inappropriate_port_and_names_check(ported_debug, tmp_path):
    r = run(ported_debug, "export", "--topic", "ragdebug", "--onto", "0.5.23", "--out", str(tmp_path / "pr"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Upstream-Status: Inappropriate" in r.stderr and f"{RAGDEBUG}/one.patch" in r.stderr, r.stderr
    assert "--check" in r.stderr
    assert not (tmp_path / "pr").exists()


def test_export_check_verifies_a_port_on_the_one_it_requires(ported_debug, tmp_path):
    """--check: the ragged port applied first (strict git am), then the patch,
    and its evidence run before (v0.5.23 + the ragged port) and after; nothing
    written.  Without the ragged port the patch would not apply at all (its
    context is the ragged port's own line)."""
    out = tmp_path / "pr"
    r = run(ported_debug, "export", "--topic", "ragdebug", "--onto", "0.5.23", "--out", str(out), "--check",
            "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = r.data
    assert d["status"] == "checked" and d["requires"] == [{"topic": "ragged", "patches": 2}], d
    (p,) = d["patches"]
    assert p["status"] == "applied" and p["ports"] == ["dbg.patch"]
    (t,) = p["evidence"]["tests"]
    assert (t["before"], t["after"], t["verdict"]) == ("failed", "passed", "fails on pristine, passes patched")
    assert t["before_reason"].startswith("AssertionError: refused: position 0:"), t["before_reason"]
    assert p["evidence"]["runs"]["before"]["command"].endswith("--tree <v0.5.23 + ragged port (2)>")
    assert p["evidence"]["runs"]["after"]["command"].endswith("--tree <v0.5.23 + ragged port (2) + patches 1..1>")
    assert d["files"] == [] and not out.exists()
    text = run(ported_debug, "export", "--topic", "ragdebug", "--onto", "0.5.23", "--out", str(out), "--check",
               "--no-tests").stdout
    assert "on the ragged port (2 patch(es), Requires: ragged)" in text and "--check: nothing written" in text


def test_export_check_stops_where_the_required_port_does_not_apply(ported_debug, port_patches, tmp_path):
    bad = port_patches["one.patch"].replace("\n     for p, pv in enumerate(per_pos_val):\n",
                                            "\n     for p, pv in enumerate(per_pos_val, 1):\n")
    write_port(ported_debug.root, {"one.patch": bad, "two.patch": port_patches["two.patch"]})
    r = run(ported_debug, "export", "--topic", "ragdebug", "--onto", "0.5.23", "--check", "--no-tests")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{PORT}/one.patch, which {RAGDEBUG} requires, does not apply with strict git am" in r.stderr, r.stderr
    assert FLATTEN in r.stderr


def test_lint_reads_requires_and_not_ported(ported_debug):
    assert lint(ported_debug) == (0, [])
    d = ported_debug.root / RAGDEBUG
    one = (d / "one.patch").read_text()
    (d / "one.patch").write_text(one.replace("Requires: ragged", "Requires: nowhere"))
    assert lint(ported_debug)[1] == [("Requires", f"{RAGDEBUG}: 'Requires: nowhere' names no other port series "
                                                  "in patches/ports/v0.5.23/")]
    (d / "one.patch").write_text(one)
    # a pinned patch the port cannot carry: said in the series, with the reason
    two = ported_debug.root / PORT / "two.patch"
    two.write_text(two.read_text().replace(DROPPED, ""))
    series_file = ported_debug.root / PORT / "series"
    text = series_file.read_text()
    assert lint(ported_debug)[1] == [("Ports", f"{PORT}: pinned patch(es) of topic 'ragged' not accounted for: "
                                               "nsa.patch")]
    series_file.write_text(text + "# not ported: nsa.patch -- the pool it extends is gone at v0.5.23;\n"
                                  "#   a port would be a new pool\n")
    assert lint(ported_debug) == (0, [])
    assert ports.not_ported(ported_debug.root / PORT) == [
        ("nsa.patch", "the pool it extends is gone at v0.5.23; a port would be a new pool")]
    nsa = "# not ported: nsa.patch -- its pool is gone\n"
    for comments, error in [
            ("# not ported: nsa.patch --\n", "'not ported: nsa.patch' gives no reason"),
            (nsa + "# not ported: gone.patch -- why\n", "'not ported: gone.patch' names no pinned patch of "
                                                        "topic 'ragged'"),
            (nsa + "# not ported: kept.patch -- why\n", "kept.patch is said not ported and is named by a port "
                                                        "patch's 'Ports:' or 'Dropped:'")]:
        series_file.write_text(text + comments)
        assert [e for _, e in lint(ported_debug)[1]] == [f"{PORT}/series: {error}"], comments
