"""The --json convention of every tool (docs/json.md): one object on
stdout with "schema" and "exit_code" (the process's own exit status), a
listing as a key of it, a skipped part null rather than absent, errors and
Ctrl-C in the same envelope; each run through the real command line."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sgl_overlay import cli
from sgl_overlay.harness import scenario_names
from sgl_overlay.planner import gpus
from tests.apply.support import Project
from tests.terminal import AT_A_TERMINAL

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = 1                                   # docs/json.md


def tool(name, *args, cwd=ROOT):
    p = subprocess.run([sys.executable, str(ROOT / "tools" / f"{name}.py"), *map(str, args)], cwd=cwd,
                       capture_output=True, text=True, timeout=900)
    return p, document(p)


def document(p):
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict), p.stdout[:500]
    assert doc["schema"] == SCHEMA and doc["exit_code"] == p.returncode, (doc.get("schema"), doc.get("exit_code"),
                                                                           p.returncode, p.stderr[-2000:])
    return doc


def test_listings_are_objects_with_the_envelope():
    p, doc = tool("apply", "--list", "--json")
    assert p.returncode == 0 and [x["name"] for x in doc["patches"]]
    p, doc = tool("regress", "--list", "--json")
    assert p.returncode == 0 and [x["name"] for x in doc["scenarios"]] == scenario_names()
    p, doc = tool("plan", "--gpus", "--json")
    assert p.returncode == 0 and [g["name"] for g in doc["gpus"]] == [g.name for g in gpus.GPUS]
    p, doc = tool("stack", "lint", "--json")
    assert p.returncode in (0, 1) and doc["status"] == ("ok" if p.returncode == 0 else "findings")


@pytest.mark.parametrize("name,args,says", [
    ("apply", ["--wait", "-1"], "--wait must be 0 or more"),
    ("regress", ["--tree", ".", "--scenario", "dflash-smok"], "unknown scenario"),
    ("plan", ["--json-typo"], "unrecognized arguments"),
    ("bisect", ["--releases", "0.5.11..0.5.16"], "no test: give --scenario NAME"),
    ("stack", ["check"], "--against"),
    ("bundle", ["--release", "0.5.18", "--python", "2.7", "--out", "o", "--downloads", "d"], "--python '2.7'"),
    ("imports", [], "--bundle"),
])
def test_errors_are_the_same_envelope(name, args, says):
    p, doc = tool(name, *args, "--json")
    assert p.returncode == 2, p.stderr
    assert doc["status"] == "error" and says in doc["error"] + (doc["hint"] or ""), doc
    assert set(doc) >= {"error", "hint"}              # hint: null where there is none, never absent
    assert f"error: {doc['error']}" in p.stderr


def test_a_plan_without_its_optional_parts_has_them_null(pristine_tree):
    """--no-suggest --no-sensitivity: the keys are there, null; exit_code, not exit."""
    from sgl_overlay import lock
    pin = lock.load(ROOT / "upstream.lock").version
    p, doc = tool("plan", ROOT / "tests" / "plan" / "data" / "llama-3.1-8b", "--gpu", "H200", "--release", pin,
                  "--no-suggest", "--no-sensitivity", "--json", "-q", "--", "--tp-size", "1")
    assert p.returncode in (0, 1), p.stderr
    assert "exit" not in doc
    for key in ("suggestions", "search", "sensitivity"):
        assert key in doc and doc[key] is None, key
    assert "tree_remedies" in doc


def test_ctrl_c_with_json_is_a_document(tmp_path):
    project = Project(tmp_path / "proj", (ROOT / "upstream.lock").read_text())
    p = subprocess.run([*AT_A_TERMINAL, "-P", str(ROOT / "tests" / "reliability" / "interrupt_at.py"),
                        "helper-first", "10", "apply", "--root", project.root, "--out", project.out, "--json"],
                       capture_output=True, text=True, timeout=600)
    assert document(p) == {"status": "interrupted", "exit_code": 130, "schema": SCHEMA}


def test_the_envelope_refuses_what_would_break_it():
    assert cli.document({"a": 1}, 3) == {"a": 1, "exit_code": 3, "schema": SCHEMA}
    with pytest.raises(TypeError):
        cli.document([1, 2], 0)                              # a listing goes under a key
    with pytest.raises(ValueError):
        cli.document({"exit_code": 1}, 0)                    # its own exit_code must be the command's
