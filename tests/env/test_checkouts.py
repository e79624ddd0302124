"""Every tool works on the checkout it runs in (docs/checkouts.md).

The library these tests run is installed from this repository (the
"first" checkout: `pip install -e .`).  A second checkout, a copy with a
different series, must be served by it as its own: each tool run there lists,
checks, builds and lints the second stack, and reads or writes nothing of the
first but the library's own code.  What a tool process and every Python
process it starts open, list, run and rename is recorded by an audit hook
(``sys.addaudithook``, through a sitecustomize on PYTHONPATH), and any path
under the first checkout outside the library is a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from sgl_overlay import lock, project, series

REPO = Path(__file__).resolve().parents[2]
PIN = lock.load(REPO / "upstream.lock").version
NEXT = "0.5.18"      # the release after the pin: the bisect's other end
TOOLS = ("apply", "bisect", "regress", "plan", "stack", "bundle", "imports")

AUDIT = textwrap.dedent('''
    import os, sys
    _LOG = os.environ.get("SGLO_AUDIT_LOG")
    _EVENTS = {"open", "os.listdir", "os.scandir", "os.chdir", "os.mkdir", "os.rename", "os.remove",
               "os.rmdir", "os.symlink", "os.link", "os.truncate", "os.chmod", "shutil.copyfile",
               "shutil.copytree", "shutil.rmtree", "shutil.move", "subprocess.Popen", "os.exec", "os.posix_spawn"}

    def _strings(value):
        if isinstance(value, (str, bytes, os.PathLike)):
            yield os.fsdecode(value)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from _strings(v)

    def _hook(event, args, _open=open, _busy=[]):
        if event not in _EVENTS or not _LOG or _busy:
            return
        _busy.append(1)
        try:
            if event == "subprocess.Popen":
                args = (args[0], args[1], args[2])          # executable, argv, cwd (not the environment)
            try:
                here = os.getcwd()
            except OSError:
                here = ""
            names = [s if os.path.isabs(s) else os.path.join(here, s) for s in _strings(args) if s]
            names = [n.replace("\\n", "\\\\n") for n in names]     # one line each, a commit message too
            with _open(_LOG, "a") as f:
                for n in names:
                    f.write(f"{os.getpid()} {event} {n}\\n")
        finally:
            _busy.pop()

    sys.addaudithook(_hook)
''')


def allowed_prefixes():
    """Under the first checkout, only the installed library (and its byte
    code), the interpreter's own folders and the content-keyed cache."""
    return [str(REPO / "tools" / "sgl_overlay"), sys.prefix, sys.base_prefix,
            str(project.cache_dir()), os.environ.get("SGL_OVERLAY_TEST_CACHE", "\0")]


def touched_first(log: Path, second: Path) -> list[str]:
    """What the audited runs did under the first checkout (beyond what is
    allowed); the log must show them reading the second checkout's stack,
    so a hook that recorded nothing cannot pass."""
    inside, ok = str(REPO), allowed_prefixes()
    lines = log.read_text().splitlines()
    assert any(f"open {second}{os.sep}" in line for line in lines), f"{log}: no file of {second} was opened"
    bad = []
    for line in lines:
        _, event, name = line.split(" ", 2)
        path = os.path.normpath(name)
        if (path == inside or path.startswith(inside + os.sep)) and not any(
                path == a or path.startswith(a.rstrip(os.sep) + os.sep) for a in ok):
            bad.append(f"{event} {path}")
    return sorted(set(bad))


def make_checkout(dest: Path, keep: int) -> Path:
    """A second checkout: this repository's lock, overlay and shims, and the
    first ``keep`` patches of its series."""
    names = series.read_series(REPO / "patches")[:keep]
    (dest / "patches").mkdir(parents=True)
    for name in names:
        shutil.copy(REPO / "patches" / name, dest / "patches" / name)
    (dest / "patches" / "series").write_text("".join(n + "\n" for n in names))
    shutil.copytree(REPO / "overlay", dest / "overlay")
    shutil.copy(REPO / "upstream.lock", dest / "upstream.lock")
    (dest / "tools").mkdir()
    for tool in (*TOOLS, "_launch"):     # the shims, and the launcher they start
        shutil.copy(REPO / "tools" / f"{tool}.py", dest / "tools" / f"{tool}.py")
    return dest


@pytest.fixture(scope="module")
def second(tmp_path_factory):
    return make_checkout(tmp_path_factory.mktemp("second") / "proj", keep=2)


@pytest.fixture
def audited(tmp_path):
    """``run(argv, cwd)`` -> CompletedProcess, every Python process of it audited."""
    hook = tmp_path / "audit"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(AUDIT)
    log = tmp_path / "audit.log"

    def run(argv, cwd, timeout=900):
        env = dict(os.environ, SGLO_AUDIT_LOG=str(log),
                   PYTHONPATH=os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))
        return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)

    run.log = log
    return run


def sgl(*args):
    return [sys.executable, "-m", "sgl_overlay", *args]


def listed(p):
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["patches"]


def test_each_checkout_lists_its_own_stack(second, tmp_path):
    mine = [p.name for p in series.load(REPO).patches]
    theirs = series.read_series(second / "patches")
    assert len(mine) > len(theirs) == 2
    run = lambda argv, cwd: subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300)  # noqa: E731
    names = lambda p: [x["name"] for x in listed(p)]                                                 # noqa: E731
    # where you stand: at the top of the second checkout, or in a folder below it
    assert names(run(sgl("apply", "--list", "--json"), second)) == theirs
    (second / "patches" / "deeper").mkdir(exist_ok=True)
    assert names(run(sgl("apply", "--list", "--json"), second / "patches" / "deeper")) == theirs
    # a shim: its own checkout, wherever you stand
    assert names(run([sys.executable, second / "tools" / "apply.py", "--list", "--json"], tmp_path)) == theirs
    assert names(run([sys.executable, REPO / "tools" / "apply.py", "--list", "--json"], second)) == mine
    # --root wins over both
    assert names(run([sys.executable, REPO / "tools" / "apply.py", "--list", "--json", "--root", second],
                     REPO)) == theirs
    # a checkout with an empty series lists nothing, the first is unchanged
    empty = make_checkout(tmp_path / "empty", keep=0)
    assert names(run(sgl("apply", "--list", "--json"), empty)) == []
    assert names(run([sys.executable, empty / "tools" / "apply.py", "--list", "--json"], REPO)) == []
    assert names(run(sgl("apply", "--list", "--json"), REPO)) == mine


@pytest.mark.parametrize("tool", TOOLS)
def test_outside_any_checkout_a_command_that_needs_one_stops_with_exit_2(tool, tmp_path):
    argv = {"apply": ["--list"], "bisect": ["--releases", "0.5.11..0.5.12", "--", "true"],
            "regress": None, "plan": ["MODEL", "--gpu", "H200", "--", "--mem-fraction-static", "0.8"],
            "stack": ["lint"], "bundle": [], "imports": None}[tool]
    if argv is None:          # regress and imports work on a tree you name: they need no checkout
        p = subprocess.run(sgl(tool, "--help"), cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return
    (tmp_path / "MODEL").mkdir()
    (tmp_path / "MODEL" / "config.json").write_text(
        (REPO / "tests" / "plan" / "data" / "qwen3.6-27b" / "config.json").read_text())
    p = subprocess.run(sgl(tool, *argv), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert f"no sgl-overlay checkout at or above {tmp_path.resolve()}" in p.stderr, p.stderr
    assert "upstream.lock, patches/series, overlay/" in p.stderr and "--root DIR" in p.stderr


def test_a_root_that_is_not_a_checkout_names_what_it_lacks(tmp_path):
    (tmp_path / "upstream.lock").write_text("")
    p = subprocess.run(sgl("stack", "lint", "--root", tmp_path), cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert f"--root {tmp_path} is not an sgl-overlay checkout: {tmp_path} lacks patches/series, overlay" in p.stderr


@pytest.fixture(scope="module")
def built(second, tmp_path_factory):
    """The second checkout's patched tree, built by a run in it (audited)."""
    log = tmp_path_factory.mktemp("audit-build")
    (log / "sitecustomize.py").write_text(AUDIT)
    env = dict(os.environ, SGLO_AUDIT_LOG=str(log / "audit.log"), PYTHONPATH=str(log))
    p = subprocess.run(sgl("apply", "--json", "-q"), cwd=second, env=env, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), log / "audit.log"


def test_the_audit_sees_a_run_that_reads_the_first_checkout(second, audited):
    """The check itself: a run of the first checkout's own shim (which works on the first) is caught."""
    p = audited(sgl("apply", "--list"), second)           # reads the second's series: the log shows it
    assert p.returncode == 0, p.stderr
    p = audited([sys.executable, REPO / "tools" / "apply.py", "--list"], second)
    assert p.returncode == 0, p.stderr
    assert f"open {REPO / 'patches' / 'series'}" in touched_first(audited.log, second)


def test_apply_builds_the_second_stack_into_the_second_checkout(second, built):
    result, log = built
    assert Path(result["dest"]) == second / "build" / "sglang"
    assert result["manifest"]["stack_digest"] == series.load(second).digest != series.load(REPO).digest
    assert [Path(p).name for p in result["manifest"]["patches"]] == series.read_series(second / "patches")
    assert touched_first(log, second) == []


def test_apply_check_checks_the_second_stack(second, audited):
    p = audited(sgl("apply", "--check", "--json", "-q"), second)
    assert p.returncode == 0, p.stderr
    assert [x["patch"] for x in json.loads(p.stdout)["patches"]] == series.read_series(second / "patches")
    assert touched_first(audited.log, second) == []


def test_stack_lint_and_refresh_work_on_the_second_stack(second, built, audited):
    p = audited(sgl("stack", "lint", "--json"), second)
    assert p.returncode == 0, p.stderr
    p = audited(sgl("stack", "refresh", "--check", "--tree", second / "build" / "sglang", "--json"), second)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["patches"] == series.read_series(second / "patches")
    assert touched_first(audited.log, second) == []


def test_plan_plans_the_second_checkouts_tree(second, built, audited, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(REPO / "tests" / "plan" / "data" / "qwen3.6-27b" / "config.json", model / "config.json")
    p = audited(sgl("plan", model, "--gpu", "H200", "--no-suggest", "--no-sensitivity", "--json", "--",
                    "--mem-fraction-static", "0.85"), second)
    assert p.returncode in (0, 1), p.stderr
    tree = json.loads(p.stdout)["tree"]
    assert str(second / "build" / "sglang") in json.dumps(tree), tree
    assert touched_first(audited.log, second) == []


def test_regress_and_imports_from_the_second_checkout(second, built, audited):
    tree = second / "build" / "sglang"
    p = audited(sgl("regress", "--tree", tree, "--scenario", "dflash-smoke", "--json"), second)
    assert p.returncode in (0, 1), p.stderr
    p = audited(sgl("imports", "--tree", tree / "python", "--json", "-q"), second)
    assert p.returncode in (0, 1), p.stderr
    assert touched_first(audited.log, second) == []


def test_bisect_with_the_stack_uses_the_second_stack(second, audited, tmp_path):
    log = tmp_path / "bisect.jsonl"
    p = audited(sgl("bisect", "--releases", f"{PIN}..{NEXT}", "--with-stack", "--log", log, "--json", "--",
                    sys.executable, "-c", "import sys, os; sys.exit(not os.path.isdir(sys.argv[1]))", "{tree}"),
                second)
    assert p.returncode in (0, 4, 5, 6), p.stderr
    header = json.loads(log.read_text().splitlines()[0])
    header = header.get("header", header)
    assert header["stack_digest"] == series.load(second).digest
    assert Path(header["stack_root"]) == second
    assert touched_first(audited.log, second) == []


def test_bundle_writes_under_the_second_checkout(second, audited):
    """A bundle too big for its budget (exit 1): the patched tree and wheel it made first are the
    second checkout's."""
    p = audited(sgl("bundle", "--max-mib", "0.001", "--json", "-q"), second)
    assert p.returncode == 1 and json.loads(p.stdout)["fits"] is False, p.stderr
    assert [w.name for w in (second / "build" / "bundle.wheel").glob("*.whl")]
    assert touched_first(audited.log, second) == []


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A new virtual environment with the project installed from its wheel
    (``pip install .``, not editable); the dependencies are this one's."""
    base = tmp_path_factory.mktemp("installed")
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels,
                    REPO], check=True, capture_output=True, timeout=600)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=600)
    py = venv / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *wheels.glob("*.whl")],
                   check=True, capture_output=True, timeout=600)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "outer-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_a_non_editable_install_works_from_a_checkout(installed, second, tmp_path):
    py = installed / "bin" / "python"
    where = subprocess.run([py, "-c", "import sgl_overlay; print(sgl_overlay.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert str(installed) in where and str(REPO) not in where
    cmd = installed / "bin" / "sgl-overlay"

    def ok(*argv, cwd=second):
        p = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (argv, p.stderr)
        return p.stdout

    assert [x["name"] for x in json.loads(ok(cmd, "apply", "--list", "--json"))["patches"]] == \
        series.read_series(second / "patches")
    assert [x["name"] for x in json.loads(ok(py, second / "tools" / "apply.py", "--list", "--json",
                                             cwd=tmp_path))["patches"]] == series.read_series(second / "patches")
    ok(cmd, "stack", "lint")
    assert "dflash-smoke" in ok(cmd, "regress", "--list")          # the scenarios ship in the wheel
    assert "H200" in ok(cmd, "plan", "--gpus")                      # and the GPU table
    for tool in TOOLS:
        assert "usage:" in ok(cmd, tool, "--help")
