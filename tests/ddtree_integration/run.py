"""Parent side of the probes: one fresh interpreter per probe (see child.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_root(tree: Path) -> Path:
    """The directory holding ``sglang/`` (pristine: the tree itself; patched: tree/python)."""
    from tools.sglo.harness.layout import source_root as _sr

    return _sr(tree)


def probe(tree: Path, name: str, timeout: float = 180.0, **args) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    req = {"root": str(source_root(Path(tree))), "probe": name, "args": args}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.ddtree_integration.child"],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        cwd=str(REPO),
        env=env,
        timeout=timeout,
    )
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"probe {name} on {tree}: the child exited {proc.returncode} without a result; "
            f"stderr ends: {proc.stderr[-2000:]}"
        )
    return json.loads(lines[-1])
