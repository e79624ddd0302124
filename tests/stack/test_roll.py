"""tools/stack.py roll (docs/stack.md, "roll"), the version ranges
(``applies:``), and the tools knowing the ports.

The real part runs once for the module, on the real v0.5.23 through the
tests' cache: ``roll --release 0.5.23 --topic debug`` beside
``check --against 0.5.23`` and ``export --topic debug --onto 0.5.23 --check``
run by hand; the roll's figures must be theirs.  The rest is the pure
decisions (hand-made inputs) and the CI workflow file."""
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sgl_overlay.commands import stack as stack_cmd
from sgl_overlay.stack import ranges, roll
from sgl_overlay.stack.classify import Status
from sgl_overlay.stack.export import PortPatch
from sgl_overlay.stack.rebase import RebasedPatch
from sgl_overlay.stack.lint import lint_ranges
from tests.apply.support import ROOT
from tests.stack.test_topic_port import hashes, make_checkout

STACK = ROOT / "tools" / "stack.py"
WORKFLOW = ROOT / ".github" / "workflows" / "roll.yml"


def tool(*args, timeout=900):
    return subprocess.run([sys.executable, str(STACK), *args], capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------
# the roll's figures are check's and export --check's (real v0.5.23)

@pytest.fixture(scope="module")
def by_hand(tmp_path_factory):
    """One roll onto v0.5.23 (the debug topic, with --branch debug) in a
    scratch checkout of this repository, and check / export --check there by hand."""
    root = make_checkout(tmp_path_factory.mktemp("roll") / "proj")
    before = hashes(root)
    out = root.parent / "report"
    # without the evidence tests (a minute each way on the 2-core machine): their figures' mapping is
    # test_cells_from_git_and_the_evidence's, and docs/results/stack.md compares a whole roll's by hand
    r = tool("roll", "--release", "0.5.23", "--topic", "debug", "--no-evidence", "--branch", "debug",
             "--out", str(out), "--json", "-q", "--root", str(root))
    c = tool("check", "--against", "0.5.23", "--json", "-q", "--root", str(root))
    e = tool("export", "--topic", "debug", "--onto", "0.5.23", "--check", "--no-tests", "--json", "-q",
             "--root", str(root))
    return root, before, out, r, c, e


def test_the_roll_agrees_with_check_and_export_check(by_hand):
    _, _, out, r, c, e = by_hand
    assert r.returncode in (0, 1), r.stderr
    assert c.returncode == 1, c.stderr            # the pinned stack does not carry onto v0.5.23 (11 conflicts)
    assert e.returncode == 0, e.stderr
    rolled, checked, exported = json.loads(r.stdout), json.loads(c.stdout), json.loads(e.stdout)
    assert json.loads((out / "roll.json").read_text()) == rolled
    (rel,) = rolled["releases"]
    assert rel["release"] == "0.5.23"
    # the pinned stack: patch for patch what check --against reports
    assert [(x["name"], x["status"]) for x in rel["pinned"]] == \
        [(x["patch"], x["status"]) for x in checked["patches"]]
    # the debug topic took its port series (made on v0.5.23), as export does
    (choice,) = rel["choices"]
    assert choice["topic"] == "debug" and choice["choice"]["series"] == exported["port"]
    assert [x["name"] for x in rel["exports"]] == ["debug"] and rel["exports"][0]["status"] == exported["status"]
    cells = {p["cell"]["patch"]: p["cell"] for p in rel["cells"]}
    for p in exported["patches"]:
        cell = cells[p["patch"]]
        assert cell["git"] == p["status"] and cell["series"] == exported["port"]
        assert cell["health"] == ("applied" if p["status"] == "applied" else "conflict")
    # the table: one row
    md = (out / "roll.md").read_text()
    assert "| debug | memory-ledger.patch | applied (port) |" in md


def test_check_names_the_port_series_that_cover_the_release(by_hand):
    _, _, _, _, c, _ = by_hand
    checked = json.loads(c.stdout)
    have = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "patches/ports/v0.5.23").glob("*/series"))
    assert checked["port_series"] == have
    carried = {n.strip() for f in (ROOT / "patches/ports/v0.5.23").glob("*/*.patch")
               for line in re.findall(r"^Ports: (.+)$", f.read_text(), re.M) for n in line.split(",")}
    # what git reported is kept; the port is named beside it
    assert {p["patch"] for p in checked["patches"] if p.get("covered")} >= carried
    assert all(p["status"] != "ported" for p in checked["patches"])


def test_a_release_that_does_not_exist_is_refused_before_any_work(tmp_path):
    for args in (["check", "--against", "9.9.9"], ["rebase", "--onto", "9.9.9"],
                 ["export", "--topic", "memory", "--onto", "9.9.9", "--out", str(tmp_path / "x")],
                 ["roll", "--release", "9.9.9", "--out", str(tmp_path / "r")]):
        p = tool(*args, timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        assert "sglang 9.9.9 is not a published release" in p.stderr
        said = [l for l in p.stderr.splitlines() if not l.startswith("[stack ")]     # progress lines apart
        assert "Available versions" not in p.stderr + p.stdout and len(said) == 2, p.stderr
        assert "building the current stack" not in p.stderr
    assert not (tmp_path / "r").exists() and not (tmp_path / "x").exists()


# --------------------------------------------------------------------------
# the pure parts

def test_newer_releases():
    listed = ["0.5.23", "0.5.17", "0.5.18", "0.5.16", "0.5.24rc1", "0.5.20.post1", "0.5.19.dev0", "0.5.18"]
    assert roll.newer_releases(listed, "0.5.17") == ["0.5.18", "0.5.20.post1", "0.5.23"]


def test_range_syntax():
    assert ranges.check_spec(">=0.5.13,<0.5.23") is None
    assert ranges.check_spec("==0.5.23") is None
    assert ranges.check_spec("") == "is empty"
    assert "not a version range" in ranges.check_spec("0.5.13-0.5.23")
    assert "not a version range" in ranges.check_spec(">=banana")
    r = ranges.Range("x.patch", ">=0.5.13,<0.5.23", 3)
    assert [r.holds(v) for v in ("0.5.12.post1", "0.5.13", "0.5.17", "0.5.22", "0.5.23")] == \
        [False, True, True, True, False]


def write_series(d, text):
    d.mkdir(parents=True, exist_ok=True)
    (d / "series").write_text(text)
    return d


def test_ranges_read_and_holds(tmp_path):
    d = write_series(tmp_path / "a", "# a comment\none.patch  # applies: >=0.5.17,<0.5.23\n"
                                     "two.patch # why it is here; applies: >=0.5.17\nthree.patch\n"
                                     "four.patch  # applies: >>0.5\n")
    rngs, bad = ranges.read(d)
    assert rngs["one.patch"].spec == ">=0.5.17,<0.5.23" and rngs["one.patch"].line == 2
    assert rngs["two.patch"].spec == ">=0.5.17" and rngs["three.patch"] is None
    assert bad == [(5, "four.patch", "applies: '>>0.5' is not a version range such as >=0.5.17,<0.5.23")]
    both = {k: rngs[k] for k in ("one.patch", "two.patch")}
    assert ranges.holds(both, "0.5.20") is ranges.Holds.YES
    assert ranges.holds(both, "0.5.23") is ranges.Holds.NO
    assert ranges.holds({"three.patch": None}, "0.5.20") is ranges.Holds.UNSAID
    assert ranges.holds({"one.patch": rngs["one.patch"], "three.patch": None}, "0.5.20") is ranges.Holds.PARTLY


def test_a_port_sessions_new_lines_get_the_range_of_their_release():
    said = "# header\na.patch  # applies: >=0.5.23\nb.patch\nc.patch  # why\n"
    assert ranges.with_ranges(said, ">=0.5.23") == \
        "# header\na.patch  # applies: >=0.5.23\nb.patch  # applies: >=0.5.23\nc.patch  # why; applies: >=0.5.23\n"
    unsaid = "# header\nx.patch\n"
    assert ranges.with_ranges(unsaid, ">=0.5.24") == unsaid                 # a series without ranges stays so
    assert ranges.with_ranges(unsaid, ">=0.5.24", new=True) == "# header\nx.patch  # applies: >=0.5.24\n"


def C(label, port, holds):
    return ranges.Candidate("memory", label, Path(port) if port else None, holds)


def test_choose_the_series_whose_range_holds():
    H = ranges.Holds
    pinned, port = C("v0.5.17", None, H.YES), C("v0.5.23", "patches/ports/v0.5.23/memory", H.NO)
    assert ranges.choose([pinned, port], "0.5.20") == ranges.Choice(pinned, ranges.Why.RANGE)
    pinned, port = C("v0.5.17", None, H.NO), C("v0.5.23", "patches/ports/v0.5.23/memory", H.YES)
    assert ranges.choose([pinned, port], "0.5.24") == ranges.Choice(port, ranges.Why.RANGE)
    # no ranges said: the port made on that release, else the pinned series
    pinned, port = C("v0.5.17", None, H.UNSAID), C("v0.5.23", "patches/ports/v0.5.23/memory", H.UNSAID)
    assert ranges.choose([pinned, port], "0.5.23") == ranges.Choice(port, ranges.Why.LABEL)
    assert ranges.choose([pinned, port], "0.5.20") == ranges.Choice(pinned, ranges.Why.PIN)
    # none holds: the newest made on an earlier release
    pinned, port = C("v0.5.17", None, H.NO), C("v0.5.23", "patches/ports/v0.5.23/memory", H.NO)
    assert ranges.choose([pinned, port], "0.5.30") == ranges.Choice(port, ranges.Why.NEWEST)
    assert ranges.choose([pinned, port], "0.5.20") == ranges.Choice(pinned, ranges.Why.NEWEST)
    assert ranges.choose([], "0.5.20") is None


def cell(health, patch="a.patch", series="patches/series", **kw):
    return roll.Cell(health, patch, series, **kw)


def rebased(patch, status, **kw):
    return RebasedPatch(patch, 1, "s", "t", status, **kw)


def ported(patch, status, **kw):
    return PortPatch(patch, 1, "s", "t", (), (), status, **kw)


def test_cells_from_git_and_the_evidence():
    e = rebased("a.patch", Status.MERGED_UPSTREAM, upstream_commit="0123456789abcdef")
    c = roll.pinned_cell(e)
    assert c.health is roll.Health.UPSTREAM and c.word() == "upstream at 0123456789"
    assert roll.pinned_cell(rebased("a.patch", Status.APPLIED_3WAY)).health is roll.Health.THREE_WAY
    fail = rebased("b.patch", Status.CONFLICT, failure={"file": "f.py"})
    assert roll.pinned_cell(fail).failure == {"file": "f.py"}
    t = lambda b, a, v: {"node": "t::x", "before": b, "after": a, "verdict": v, "after_reason": "E: no",  # noqa: E731
                         "before_reason": ""}
    entries = [ported("p1.patch", Status.APPLIED,
                      evidence={"tests": [t("failed", "passed", "fails on pristine, passes patched")]}),
               ported("p2.patch", Status.APPLIED, evidence={"tests": [t("failed", "failed", "fails patched")]}),
               ported("p3.patch", Status.CONFLICT, failure={"file": "g.py"})]
    got = roll.port_cells("patches/ports/v0.5.23/t", entries, 4)
    assert [c.health for c in got] == [roll.Health.APPLIED, roll.Health.EVIDENCE_FAILS, roll.Health.CONFLICT]
    assert got[0].word() == "applied, evidence 1/1" and got[1].evidence[0].why == "E: no"


def release_roll(version, placed, pinned=()):
    return roll.ReleaseRoll(version, (), tuple(placed), tuple(pinned), (), 1.0)


def test_proposals_and_rows():
    up = cell(roll.Health.UPSTREAM, git=Status.MERGED_UPSTREAM, upstream_commit="abc123")
    maybe = cell(roll.Health.PROBABLY_UPSTREAM, "b.patch", git=Status.PROBABLY_UPSTREAM)
    ported_up = cell(roll.Health.UPSTREAM, series="patches/ports/v0.5.23/t", reason="upstream already does this")
    new = cell(roll.Health.APPLIED, "n.patch", series="patches/ports/v0.5.23/t")
    rels = (release_roll("0.5.18", [roll.Placed("t", "a.patch", up), roll.Placed("t", "b.patch", maybe)]),
            release_roll("0.5.23", [roll.Placed("t", "a.patch", ported_up), roll.Placed("t", None, new)]))
    props = roll.proposals(rels)
    assert [(p.patch, p.release, p.upstream_commit, p.confirm) for p in props] == \
        [("a.patch", "0.5.18", "abc123", False), ("b.patch", "0.5.18", "", True)]

    class P:
        def __init__(self, name):
            self.name, self.topic = name, "t"
    rows = roll.rows_of([P("a.patch"), P("b.patch")], rels)
    assert [(r.patch, [a.release for a in r.cells]) for r in rows] == \
        [("a.patch", ["0.5.18", "0.5.23"]), ("b.patch", ["0.5.18"]), ("n.patch", ["0.5.23"])]
    r = roll.Roll("0.5.17", rels, rows, props, 2.0, False)
    assert r.needs_person and r.exit_code == 1           # probably upstream: a person confirms
    md = roll.markdown(r)
    assert "| t | a.patch | upstream at abc123 | upstream (port) |" in md
    assert "| t | n.patch |  | applied (port) |" in md
    assert "- b.patch from patches/series on v0.5.18: upstream (applies in reverse with one line of context): " \
           "confirm first" in md
    data = r.to_json()
    assert json.loads(json.dumps(data)) == data and data["status"] == "needs-person"
    assert data["rows"][0]["cells"][0]["cell"]["health"] == "upstream"


# --------------------------------------------------------------------------
# lint of the ranges

def test_lint_ranges(tmp_path):
    root = tmp_path
    write_series(root / "patches", "a.patch  # applies: >=0.5.17,<0.5.23\nb.patch  # applies: >=0.5.17\n")
    write_series(root / "patches/ports/v0.5.23/t", "p.patch  # applies: >=0.5.23\nq.patch\n")
    write_series(root / "patches/ports/v0.5.23/u", "r.patch  # applies: 0.5.23+\n")
    found = lint_ranges(root)
    assert [p["error"] for p in found] == [
        "patches/ports/v0.5.23/t/series: q.patch say(s) no applies: range, while other lines of the series do",
        "patches/ports/v0.5.23/u/series:1: r.patch: applies: '0.5.23+' is not a version range such as "
        ">=0.5.17,<0.5.23"]
    # against a roll report: b.patch said to hold v0.5.23 where check found a conflict; p.patch's evidence fails
    report = {"releases": [{"release": "0.5.23",
                            "pinned": [{"name": "a.patch", "status": "conflict"}, {"name": "b.patch",
                                                                                    "status": "conflict"}],
                            "cells": [{"topic": "t", "pinned": "a.patch",
                                       "cell": {"series": "patches/ports/v0.5.23/t", "patch": "p.patch",
                                                "health": "evidence fails"}}]}], "rows": []}
    errors = [p["error"] for p in lint_ranges(root, report)][2:]
    assert errors == [
        "patches/series:2: b.patch applies to >=0.5.17, which holds v0.5.23, where the roll found it conflict",
        "patches/ports/v0.5.23/t/series:1: p.patch applies to >=0.5.23, which holds v0.5.23, where the roll "
        "found it evidence fails"]


def test_lint_roll_refuses_a_file_that_is_not_a_roll_report(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{}")
    p = tool("lint", "--roll", str(f))
    assert p.returncode == 2 and "not a roll report" in p.stderr


# --------------------------------------------------------------------------
# the CI workflow

def test_the_workflow_runs_the_roll_weekly_and_on_demand_and_uploads_the_report():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]          # YAML 1.1 reads the key 'on' as true
    assert "workflow_dispatch" in on
    (cron,) = [s["cron"] for s in on["schedule"]]
    minute, hour, dom, month, dow = cron.split()
    assert dom == "*" and month == "*" and re.fullmatch(r"[0-6]", dow)      # once a week
    steps = [s for job in wf["jobs"].values() for s in job["steps"]]
    (run,) = [s for s in steps if "tools/stack.py roll" in s.get("run", "")]
    line = next(l for l in run["run"].splitlines() if "tools/stack.py roll" in l)
    optional = '${RELEASE:+--release "$RELEASE"}'                # the dispatch input, when given
    assert optional in line
    argv = shlex.split(line.split("tools/stack.py", 1)[1].replace(optional, ""))
    args = stack_cmd.parse(argv)                                 # the real parser takes it
    assert args.verb == "roll" and not args.release
    assert stack_cmd.parse(argv + ["--release", "0.5.23"]).release == ["0.5.23"]
    assert "release" in on["workflow_dispatch"]["inputs"]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload.get("if") == "always()"
    assert Path(upload["with"]["path"]).as_posix().rstrip("/") == Path(args.out).as_posix()
    # exit 1 (a cell that needs a person) still uploads and does not fail the job; 2 and 3 do
    assert 'if [ "$code" -gt 1 ]; then exit "$code"; fi' in run["run"]


def test_apply_refuses_a_pinned_patch_whose_range_does_not_hold_the_pin(tmp_path):
    root = tmp_path / "proj"
    for name in ("patches", "overlay"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("ports"))
    shutil.copy(ROOT / "upstream.lock", root / "upstream.lock")
    s = root / "patches" / "series"
    s.write_text(re.sub(r"(?m)^budget-ledger\.patch.*$", "budget-ledger.patch  # applies: >=0.5.18", s.read_text()))
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "apply.py"), "--check", "--root", str(root)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(r"patches/series:\d+: budget-ledger\.patch applies to >=0\.5\.18, which does not hold the "
                     r"pin v0\.5\.17", p.stderr), p.stderr
    assert "downloading" not in p.stderr and "applying patch" not in p.stderr


def test_branch_starts_the_topic_port_session_a_person_finishes(by_hand, tmp_path):
    root, before, out, r, _, _ = by_hand
    md = (out / "roll.md").read_text()
    # the pinned memory-ledger.patch conflicts on v0.5.23 + the memory port (tests/stack/test_topic_port.py)
    assert "## Branch" in md and "Topic debug onto v0.5.23: a port session in" in md
    assert "stopped at memory-ledger.patch: finish it with `python tools/stack.py port --continue`" in md
    assert json.loads(r.stdout)["branch"]["stopped_at"] == "memory-ledger.patch"
    status = subprocess.run([sys.executable, str(STACK), "port", "--status", "--json", "--root", str(root)],
                            capture_output=True, text=True)
    assert status.returncode == 1 and json.loads(status.stdout)["stop"]["patch"] == "memory-ledger.patch"
    # a second --branch while it waits: refused before any work
    again = tool("roll", "--release", "0.5.23", "--branch", "--out", str(tmp_path / "again"), "--root", str(root))
    assert again.returncode == 2 and "already in" in again.stderr and not (tmp_path / "again").exists()
    assert tool("port", "--abort", "--root", str(root)).returncode == 0
    assert hashes(root) == before

def test_a_killed_roll_leaves_the_previous_report_whole(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "roll.json").write_text('{"the": "previous report"}\n')
    (out / "roll.md").write_text("# the previous report\n")
    p = subprocess.Popen([sys.executable, str(STACK), "roll", "--release", "0.5.18", "--no-evidence",
                          "--out", str(out)], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:                      # killed in the middle of its work
        if re.search(r"\bpatch 1/\d+ ", line):
            p.kill()
            break
    else:
        pytest.fail("the roll ended without a patch 1/N progress line to be killed at")
    p.wait()
    assert p.returncode != 0
    assert sorted(f.name for f in out.iterdir()) == ["roll.json", "roll.md"]
    assert (out / "roll.json").read_text() == '{"the": "previous report"}\n'
    assert (out / "roll.md").read_text() == "# the previous report\n"
