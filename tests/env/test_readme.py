"""Every command README.md shows, run as a reader would: in a copy of this
checkout (its tracked files, what a clone holds), from its root, with the
words of the README's code blocks, each checked against its documented
outcome and exit code (issue 43: the README's bisect example ended "cannot
reproduce", exit 5).

The two set-up commands are checked for their form (what they install is what
this suite runs in); the second half of the first, `python tools/apply.py
--wheel dist`, is run, since the commands after it work on its build/sglang.
The two lines for the GPU machine are checked against the wheel that build
wrote: its name is the README's, and it holds the module the README starts.
A README command without an expectation here, or an expectation without its
command, fails the test."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from sgl_overlay import lock as lockmod, series

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def readme_commands():
    """Every line of the README's fenced code blocks, its trailing comment dropped."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", README.read_text(), re.M | re.S)
    lines = [line.split("  #")[0].split(" # ")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


SETUP_BUILD = "python -m pip install -e . && python tools/apply.py --wheel dist"
SETUP_TESTS = "python -m pip install -e '.[test]' && python -m pytest -n 2"
GPU_INSTALL = "pip install sglang-0.5.17+overlay.<digest>-cp311-cp311-manylinux_2_34_x86_64.whl"
GPU_START = "python -m sglang.launch_server --model-path ..."
APPLY_LIST = "python tools/apply.py --list"
APPLY_CHECK = "python tools/apply.py --check"
REGRESS = "python tools/regress.py --tree build/sglang --scenario zero-requests-dflash"
BISECT = "python tools/bisect.py --releases 0.5.11..0.5.13.post1 --scenario zero-requests-dflash --fixed"
PLAN = 'python tools/plan.py tests/plan/data/qwen3.6-27b --gpu "RTX PRO 6000 Blackwell" -- --tp 1'
CHECK = "python tools/stack.py check --against 0.5.18"
ROLL = "python tools/stack.py roll --release 0.5.18"
REFRESH = "python tools/stack.py refresh --tree build/sglang"
RUN = [APPLY_LIST, APPLY_CHECK, REGRESS, BISECT, PLAN, CHECK, ROLL, REFRESH]


def test_every_readme_command_has_its_expectation_here():
    assert sorted(readme_commands()) == sorted([SETUP_BUILD, SETUP_TESTS, GPU_INSTALL, GPU_START, *RUN])


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of this checkout's files (tracked, and new ones git does not ignore), with the
    README's first set-up command's build done in it: build/sglang and dist/."""
    dest = tmp_path_factory.mktemp("readme") / "sgl-overlay"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    p = run(SETUP_BUILD.split(" && ")[1], dest)
    assert p.returncode == 0, p.stderr[-3000:]
    return dest


def run(line, cwd):
    """A README line as the shell would split it, `python` being this interpreter."""
    argv = shlex.split(line)
    assert argv[0] == "python", line
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=1800)


def test_the_set_up_commands_install_what_the_tools_and_tests_need():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # `pip install -e .`: the library and the sgl-overlay command
    assert project["scripts"]["sgl-overlay"] == "sgl_overlay.__main__:main"
    # `pip install -e '.[test]'` then `pytest -n 2`: the extra exists and brings pytest and xdist (-n)
    test_extra = [re.split(r"[<>=\[ ]", r)[0] for r in project["optional-dependencies"]["test"]]
    assert {"pytest", "pytest-xdist"} <= set(test_extra)


def test_the_gpu_machine_lines_name_the_wheel_the_build_wrote(checkout):
    lock = lockmod.load(checkout / "upstream.lock")
    (wheel,) = (checkout / "dist").glob("*.whl")
    name = shlex.split(GPU_INSTALL)[2]
    pattern = re.escape(name).replace(re.escape("<digest>"), "[0-9a-f]{12}")
    assert re.fullmatch(pattern, wheel.name), (name, wheel.name)
    assert f"sglang-{lock.version}+overlay." in wheel.name          # the pin's version, in the README too
    module = shlex.split(GPU_START)[2]                               # python -m sglang.launch_server
    with zipfile.ZipFile(wheel) as z:
        assert module.replace(".", "/") + ".py" in z.namelist()


def test_apply_list(checkout):
    p = run(APPLY_LIST, checkout)
    assert p.returncode == 0, p.stderr[-3000:]                       # docs/exit-codes.md: --list clean
    for name in series.read_series(checkout / "patches"):
        assert name in p.stdout, name


def test_apply_check(checkout):
    p = run(APPLY_CHECK, checkout)
    n = len(series.read_series(checkout / "patches"))
    assert p.returncode == 0, p.stderr[-3000:]                       # --check passed
    assert f"check passed: {n} patch(es) on v{lockmod.load(checkout / 'upstream.lock').version}" in p.stdout


def test_regress_on_the_built_tree(checkout):
    """The patched tree refuses zero-requests-dflash with a remedy that works: the scenario passes (docs/regress.md)."""
    p = run(REGRESS, checkout)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert p.stdout.startswith("PASS  zero-requests-dflash"), p.stdout


def test_bisect_finds_where_the_refusal_was_fixed(checkout):
    """docs/results/bisect.md: first-fixed 0.5.13, the last failing 0.5.12.post1, exit 0."""
    p = run(BISECT, checkout)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    assert "first fixed: 0.5.13; last failing before it: 0.5.12.post1" in p.stdout, p.stdout


def test_plan_answers_with_a_verdict_and_its_exit_code(checkout):
    """docs/plan.md: exit 0 for "starts" (also over budget, taken from the headroom), 1 for "will not start"."""
    p = run(PLAN, checkout)
    verdict = re.search(r"^VERDICT: (.+)$", p.stdout, re.M)
    assert verdict, p.stdout + p.stderr[-3000:]
    assert p.returncode == (1 if verdict[1].startswith("WILL NOT START") else 0), (p.returncode, verdict[1])
    assert "RTX PRO 6000 Blackwell" in p.stdout and "Qwen3_5ForConditionalGeneration" in p.stdout


@pytest.fixture(scope="module")
def rolled(checkout):
    return run(ROLL, checkout)


def test_check_names_the_patches_that_break_on_the_next_release(checkout, rolled):
    """docs/stack.md ("roll", the report of 2026-12-07): on v0.5.18 8 of the 15 pinned patches
    apply; check exits 1 for unresolved patches, and names each as the roll's table does."""
    p = run(CHECK, checkout)
    assert p.returncode == 1, p.stderr[-3000:]
    broken = set(re.findall(r"^\s+\d+ (\S+\.patch)\s+conflict", p.stdout, re.M))
    applied = set(re.findall(r"^\s+\d+ (\S+\.patch)\s+applied", p.stdout, re.M))
    assert (len(applied), len(broken)) == (8, 7), p.stdout
    table = (checkout / "build" / "roll" / "roll.md").read_text()
    assert broken == set(re.findall(r"^\| \w+ \| (\S+\.patch) \| conflict \|", table, re.M)), table


def test_roll_writes_the_patch_health_table(checkout, rolled):
    """docs/stack.md: exit 1 when some cell needs a person (the report written all the same)."""
    assert rolled.returncode == 1, rolled.stderr[-3000:]
    table = (checkout / "build" / "roll" / "roll.md").read_text()
    assert "| topic | patch | v0.5.18 |" in table
    assert (checkout / "build" / "roll" / "roll.json").is_file()


def test_refresh_of_the_built_tree(checkout):
    """Nothing committed in build/sglang beyond the stack: nothing to change, patches/ untouched, exit 0;
    a fix committed there: refresh writes it into patches/ (docs/stack.md, "refresh"), exit 0."""
    patches = checkout / "patches"
    before = {p.name: p.read_bytes() for p in patches.iterdir() if p.is_file()}
    p = run(REFRESH, checkout)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "nothing to change" in p.stdout, p.stdout
    assert {q.name: q.read_bytes() for q in patches.iterdir() if q.is_file()} == before
    tree = checkout / "build" / "sglang"
    target = tree / "python" / "sglang" / "version.py"
    target.write_text(target.read_text() + "# a fix\n")
    env = {"GIT_AUTHOR_NAME": "Ada Example", "GIT_AUTHOR_EMAIL": "ada@example.com",
           "GIT_COMMITTER_NAME": "Ada Example", "GIT_COMMITTER_EMAIL": "ada@example.com"}
    subprocess.run(["git", "-C", tree, "commit", "-qam", "Fix the version note"], check=True,
                   env={**os.environ, **env})
    try:
        p = run(REFRESH, checkout)
        assert p.returncode == 0, p.stderr[-3000:]
        added = sorted(set(q.name for q in patches.iterdir() if q.is_file()) - set(before))
        assert len(added) == 1 and "version-note" in added[0], added
        assert added[0] in series.read_series(patches) and added[0] in p.stdout, p.stdout
    finally:                                             # the checkout as the other commands see it
        for q in patches.iterdir():
            if q.is_file() and q.name not in before:
                q.unlink()
        for name, data in before.items():
            (patches / name).write_bytes(data)
        subprocess.run(["git", "-C", tree, "reset", "-q", "--hard", "HEAD~1"], check=True)
