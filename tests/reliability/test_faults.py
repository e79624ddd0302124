"""Every tool under a corrupt cache, a read-only destination, a full disk
(RLIMIT_FSIZE) and a package index that refuses: an error: / hint: pair
and a documented exit code, never a Traceback on the terminal."""
import os
import resource
import shutil
import signal
import subprocess
import sys

import pytest

from sgl_overlay import artifacts, lock
from tests.apply.support import ROOT
from tests.reliability.support import local_index_env, record, tool

SETPRIV = shutil.which("setpriv")
SERVED = ("0.5.8", "0.5.9")               # the releases the commands below fetch (bisect's range)


def _run(cmd, env=None, fsize=None, readonly_root=False):
    def limit():
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)        # EFBIG instead of a killing signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    if readonly_root and os.geteuid() == 0:                      # root ignores modes: drop that capability
        cmd = [SETPRIV, "--inh-caps=-dac_override,-dac_read_search",
               "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, preexec_fn=limit)


def _commands(tmp, out):
    return {
        "apply": tool("apply", "--out", out),
        "apply --wheel": tool("apply", "--out", out, "--wheel", tmp / "dist"),
        "apply --check": tool("apply", "--check"),
        "bisect": tool("bisect", "--releases", "0.5.8..0.5.9", "--log", tmp / "b" / "log.jsonl",
                       "--", sys.executable, "-c", "pass"),
        "stack refresh": tool("stack", "refresh", "--check"),
        "regress": tool("regress", "--tree", tmp / "no-tree", "--scenario", "zero-requests-dflash"),
        "plan": tool("plan", tmp / "no-model", "--gpu", "RTX PRO 6000 Blackwell"),
    }


def _fault_envs(tmp):
    """name -> (env, kwargs for _run); each with its own cache."""
    corrupt = tmp / "corrupt"
    for version in SERVED:                                        # in the test cache before it is copied
        artifacts.release(version)
    artifacts.pinned(lock.load(ROOT / "upstream.lock"))
    shutil.copytree(os.environ["SGL_OVERLAY_CACHE"] + "/artifacts", corrupt / "artifacts",
                    ignore=lambda d, names: [n for n in names if not n.startswith("sglang-0.5.")])
    for f in (corrupt / "artifacts").glob("*.whl"):
        with open(f, "r+b") as fh:                               # damaged mid-file, size kept
            fh.seek(f.stat().st_size // 2)
            fh.write(b"\0" * 4096)
    (corrupt / "artifacts" / "sglang-0.5.9-py3-none-any.whl.sha256").write_text("")   # an empty sha256 file
    offline = {**os.environ, "SGL_OVERLAY_CACHE": str(tmp / "empty"), "PIP_CONFIG_FILE": os.devnull,
               "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}
    return {
        "corrupt cache": ({**os.environ, "SGL_OVERLAY_CACHE": str(corrupt), "PIP_CONFIG_FILE": os.devnull,
                           "PIP_NO_INDEX": "1"}, {}),
        "read-only destination": (local_index_env(tmp / "ro-cache", SERVED), {"readonly_root": True}),
        "full disk (RLIMIT_FSIZE 1 MiB)": (local_index_env(tmp / "full-cache", SERVED), {"fsize": 1 << 20}),
        "index refuses (closed port)": (offline, {}),
    }


@pytest.mark.skipif(os.geteuid() == 0 and not SETPRIV, reason="root without setpriv cannot make a read-only dir")
def test_no_tool_prints_a_traceback_under_faults(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    runs, failures, seen = 0, 0, {}
    for fault, (env, kw) in _fault_envs(tmp_path).items():
        out = ro / "sglang" if kw.get("readonly_root") else tmp_path / "out" / fault.split()[0] / "sglang"
        if kw.get("readonly_root"):
            ro.chmod(0o555)
        for name, cmd in _commands(tmp_path / fault.split()[0], out).items():
            (tmp_path / fault.split()[0]).mkdir(exist_ok=True)
            p = _run(cmd, env=env, **kw)
            runs += 1
            seen[(fault, name)] = p.returncode
            ok = "Traceback" not in p.stdout + p.stderr and p.returncode >= 0 and \
                (p.returncode in (0, 1) or "error: " in p.stderr)
            failures += not ok
            assert ok, (fault, name, p.returncode, p.stderr[-3000:])
        ro.chmod(0o755)
    # the faults did bite: the corrupt cache is an integrity error, a refused index a download error
    assert seen[("corrupt cache", "apply")] == 3
    assert seen[("index refuses (closed port)", "apply")] != 0
    assert seen[("read-only destination", "apply")] == 2
    assert seen[("full disk (RLIMIT_FSIZE 1 MiB)", "apply")] != 0
    record("every tool x {corrupt cache, read-only dest, full disk, refusing index}: no Traceback",
           runs, failures, exit_codes={f"{f} / {n}": c for (f, n), c in seen.items()})
