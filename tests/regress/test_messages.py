"""What tools/regress.py says (issue 40, "Messages that mislead"): a passing refusal says the scenario
expects it; a value of the wrong type is bad input (exit 2) naming the table, the key and the type
wanted; --list says what each scenario is; an unknown name gets "did you mean"; a verdict line keeps
the case of the flags it names."""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sgl_overlay.harness import ScenarioError, load_scenario, scenario_names

ROOT = Path(__file__).resolve().parents[2]


def regress(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "regress.py"), *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_a_passing_refusal_says_the_scenario_expects_it(pristine_tree):
    """negative-rest-tp8 expects a refusal ([expect] pass = ["refused"]); the pin refuses it."""
    assert [str(o) for o in load_scenario("negative-rest-tp8").expect.passing] == ["refused"]
    p = regress("--tree", str(pristine_tree), "--scenario", "negative-rest-tp8", "--no-remedy")
    first = p.stdout.splitlines()[0]
    assert p.returncode == 1, p.stdout + p.stderr     # --no-remedy: the remedy is not verified, "works" wanted
    assert first.startswith("FAIL  negative-rest-tp8") and first.endswith(": refused"), first
    p = regress("--tree", str(pristine_tree), "--scenario", "negative-rest-tp8")
    first = p.stdout.splitlines()[0]
    assert p.returncode == 0, p.stdout + p.stderr
    assert first.startswith("PASS  negative-rest-tp8") and first.endswith(": refused, as the scenario expects"), first


def test_a_failing_outcome_names_what_the_scenario_expects(pristine_tree, tmp_path):
    text = load_scenario("negative-rest-tp8").path.read_text()
    f = tmp_path / "expects-a-start.toml"
    f.write_text(re.sub(r"(?m)^pass\s*=.*$", 'pass = ["ok"]', text))
    p = regress("--tree", str(pristine_tree), "--scenario", str(f), "--no-remedy")
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.splitlines()[0].endswith(": refused; the scenario expects ok"), p.stdout


@pytest.mark.parametrize("table,key,bad,words", [
    ("gpu", "total_mib", '"97887"', r"\[gpu\] total_mib must be an integer, not '97887' \(a string\); "
                                    r"write total_mib = 97887 \(without quotes\)"),
    ("model.text_config", "num_hidden_layers", '"sixty-four"',
     r"\[model.text_config\] num_hidden_layers must be an integer, not 'sixty-four' \(a string\); "
     r"write it as an integer, e.g. num_hidden_layers = 64"),
    ("gpu", "capability", '"9.0"', r"\[gpu\] capability must be a list of integers"),
    ("model", "architectures", '"Qwen3_5ForConditionalGeneration"', r"\[model\] architectures must be a list"),
    ("gpu", "pre_load_free_gib", "true", r"\[gpu\] pre_load_free_gib must be a number, not True"),
])
def test_a_value_of_the_wrong_type_is_bad_input(tmp_path, table, key, bad, words):
    """Each value replaced in a shipped scenario (zero-requests-dflash: a qwen3_5 model) by one of the
    wrong type: refused when the file is read, exit 2, naming the file, table, key and type wanted."""
    path = load_scenario("zero-requests-dflash").path
    data = tomllib.loads(path.read_text())
    section = data
    for part in table.split("."):
        section = section[part]
    assert key in section, (table, key)      # the key is the file's own, replaced below
    lines, header, out = path.read_text().splitlines(), None, []
    for line in lines:
        m = re.match(r"^\[([^\]]+)\]", line)
        header = m.group(1) if m else header
        if header == table and re.match(rf"^{key}\s*=", line):
            line = f"{key} = {bad}"
        out.append(line)
    f = tmp_path / "bad.toml"
    f.write_text("\n".join(out) + "\n")
    with pytest.raises(ScenarioError, match=words):
        load_scenario(str(f))
    p = regress("--tree", str(tmp_path), "--scenario", str(f))
    assert p.returncode == 2, p.stdout + p.stderr
    assert re.search(r"^error: .*bad\.toml: " + words, p.stderr, re.M), p.stderr
    assert "Traceback" not in p.stderr and "UNTESTABLE" not in p.stdout


def test_every_shipped_scenario_has_values_of_their_types():
    for name in scenario_names():
        load_scenario(name)   # raises ScenarioError naming the key otherwise


def test_list_names_each_scenario_with_what_it_is():
    p = regress("--list")
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()
    assert len(rows) == len(scenario_names())
    for row, name in zip(rows, scenario_names()):
        description = load_scenario(name).description
        assert description, f"{name}: no description"
        assert row.split()[0] == name and row.rstrip().endswith(description), row
    p = regress("--list", "--json")
    assert json.loads(p.stdout)["scenarios"] == [{"name": n, "description": load_scenario(n).description}
                                                 for n in scenario_names()]


def test_an_unknown_scenario_gets_did_you_mean(tmp_path):
    p = regress("--tree", str(tmp_path), "--scenario", "dflash-smok")
    assert p.returncode == 2
    assert "unknown scenario 'dflash-smok'" in p.stderr
    assert re.search(r"did you mean dflash-smoke\b", p.stderr), p.stderr
    with pytest.raises(ScenarioError, match="known: "):   # nothing close: the names, as before
        load_scenario("zzzz")


def test_a_verdict_line_keeps_the_case_of_its_remedy():
    from sgl_overlay.planner.inputs import GIB
    from sgl_overlay.planner.verdict import Kind, Verdict

    v = Verdict(Kind.OVER_BUDGET, int(2.44 * GIB), (("--mem-fraction-static", 0.834),))
    assert v.headline == "STARTS, OVER BUDGET BY 2.44 GIB TAKEN FROM THE HEADROOM (remedy: --mem-fraction-static = 0.834)"
    assert v.text == "starts, over budget by 2.44 GiB taken from the headroom (remedy: --mem-fraction-static = 0.834)"
    assert Verdict(Kind.WONT).headline == "WILL NOT START"
    assert Verdict(Kind.OVER_BUDGET, GIB).headline.endswith("(NO REMEDY STATED)")
