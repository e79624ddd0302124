"""Bad input: exit 2 with a message naming the thing and the next step,
before any step runs (no log written, the test never started); the exit
codes are the ones docs/bisect.md documents."""
import re

import pytest

from tests.bisect.scripts import calls, version_test
from tests.bisect.support import ROOT, bisect

SCEN = ["--scenario", "negative-rest-tp8"]


def cases(repo, tmp):
    cmd = version_test(tmp / "t.py", tmp / "calls", first_bad="0.5.14")
    return {
        "unknown release": (["--releases", "0.5.9..0.5.99", *SCEN], "sglang 0.5.99 is not a published release"),
        "not a version": (["--releases", "0.5.9..latest", *SCEN], "'latest' is not a release number"),
        "no range form": (["--releases", "0.5.9", *SCEN], "is not of the form OLD..NEW"),
        "empty range": (["--releases", "0.5.14..0.5.13", *SCEN], "is empty: 0.5.14 is not older than 0.5.13"),
        "same release": (["--releases", "0.5.13..0.5.13", *SCEN], "is empty"),
        "unknown ref": (["--repo", str(repo), "--good", "v9.9.9", "--bad", "v0.5.16", *SCEN],
                        "--good 'v9.9.9': no such commit, branch or tag"),
        "same ref": (["--repo", str(repo), "--good", "v0.5.13", "--bad", "v0.5.13", *SCEN], "the range is empty"),
        "backwards": (["--repo", str(repo), "--good", "v0.5.16", "--bad", "v0.5.9", *SCEN],
                      "pass --fixed to look for where it started working"),
        "repo without refs": (["--repo", str(repo), "--good", "v0.5.9", *SCEN], "--repo needs both --good REF and --bad REF"),
        "two ranges": (["--releases", "0.5.9..0.5.10", "--repo", str(repo), *SCEN], "give exactly one range"),
        "no test": (["--releases", "0.5.9..0.5.10"], "no test: give --scenario NAME or a command after --"),
        "unknown scenario": (["--releases", "0.5.9..0.5.10", "--scenario", "no-such"], "--scenario no-such"),
        "command cannot start": (["--releases", "0.5.9..0.5.10", "--", "/no/such/tool", "{tree}"],
                                 "test command '/no/such/tool' cannot start"),
        "command ignores the tree": (["--releases", "0.5.9..0.5.10", "--", "true"], "never mentions {tree}"),
        "scenario and command": (["--releases", "0.5.9..0.5.10", *SCEN, "--", *cmd], "not both"),
        "runs zero": (["--releases", "0.5.9..0.5.10", *SCEN, "--runs", "0"], "--runs must be at least 1"),
        "resume with a range": (["--resume", str(tmp / "x.jsonl"), "--releases", "0.5.9..0.5.10"],
                                "takes the range, the test and their options from the log; drop --releases"),
        "resume with --fixed": (["--resume", str(tmp / "x.jsonl"), "--fixed"], "drop --fixed"),
        "replay missing log": (["--replay", str(tmp / "missing.jsonl")], "cannot read it"),
        "unknown option": (["--releases", "0.5.9..0.5.10", "--frobnicate"], "unrecognized arguments"),
        "report with a command": (["--releases", "0.5.9..0.5.10", "--report", str(tmp / "r.md"), "--", *cmd],
                                  "--report needs --scenario"),
        "report with --fixed": (["--releases", "0.5.9..0.5.10", *SCEN, "--fixed", "--report", str(tmp / "r.md")],
                                "it needs a regression, not --fixed"),
        "report with --with-stack": (["--releases", "0.5.9..0.5.10", *SCEN, "--with-stack", "--report",
                                      str(tmp / "r.md")], "does not go with --with-stack"),
        "report is a directory": (["--releases", "0.5.9..0.5.10", *SCEN, "--report", str(tmp)], "is a directory"),
    }


NAMES = ["unknown release", "not a version", "no range form", "empty range", "same release", "unknown ref", "same ref",
         "backwards", "repo without refs", "two ranges", "no test", "unknown scenario", "command cannot start",
         "command ignores the tree", "scenario and command", "runs zero", "resume with a range", "resume with --fixed",
         "replay missing log", "unknown option", "report with a command", "report with --fixed",
         "report with --with-stack", "report is a directory"]


def test_every_case_is_listed(tmp_path):
    assert sorted(NAMES) == sorted(cases("R", tmp_path))


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_exits_2_before_any_step(name, tmp_path, repo):
    args, message = cases(repo, tmp_path)[name]
    log = tmp_path / "log.jsonl"
    extra = [] if any(a in args for a in ("--resume", "--replay")) else ["--log", str(log)]
    rc, _, err = bisect(*args[:args.index("--")] if "--" in args else args, *extra,
                        *(args[args.index("--"):] if "--" in args else []))
    assert rc == 2, err
    assert message in err, err
    assert "hint:" in err
    assert not log.exists() and calls(tmp_path / "calls") == []
    assert not (tmp_path / "r.md").exists()


def test_exit_codes_are_documented():
    from sgl_overlay.commands import bisect as cli
    doc = (ROOT / "docs" / "bisect.md").read_text()
    table = dict(re.findall(r"^\| (\d+) \| [`(]?([a-z -]+)", doc, re.M))
    for verdict, code in cli.EXIT.items():
        assert table.get(str(code)) in (verdict, "first-bad"), (verdict, code, table)
    for code in ("1", "2", "3", "8", "130"):
        assert code in table
    assert str(cli.UNFINISHED) == "8" and str(cli.INTERRUPTED) == "130"


def test_the_script_never_shadows_the_stdlib_bisect_module(tmp_path):
    """Run as a script, tools/ would be sys.path[0] and tools/bisect.py would
    be imported in place of the standard library's bisect (random imports
    it).  The shim re-executes with -P, so tools/ is never on sys.path: the
    command runs, imports random, and `import bisect` there is the
    standard library's."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, str(ROOT / "tools" / "bisect.py"), "--help"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0 and "--releases" in p.stdout, p.stderr


def test_no_tool_or_test_changes_sys_path():
    changes = re.compile(r"sys\.path(\[[^]]*\]\s*=|\.(insert|append|extend|remove|pop)\()")
    offenders = [str(f.relative_to(ROOT)) for d in ("tools", "tests") for f in (ROOT / d).rglob("*.py")
                 if changes.search(f.read_text())]
    assert offenders == [], offenders
