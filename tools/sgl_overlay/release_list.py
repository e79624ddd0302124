"""The published sglang releases (bisect's ranges, ``stack.py --onto
latest``), as pip lists them; the last list is kept in
``<cache>/releases.json`` for a run without a package index."""
import json
import os
import re
import subprocess
import sys
import time

from . import versions
from .artifacts import PACKAGE
from .errors import UsageError
from .project import cache_dir


def list_releases(progress=None, pre=False):
    """The published sglang versions, oldest first, as
    ``python -m pip index versions --pre sglang`` lists them (pip's own
    configuration decides the index); the final releases only unless
    ``pre`` (release candidates such as 0.5.10rc0 are published too, and
    a port or a rebase may name one)."""
    found = _listed(progress)
    return found if pre else [v for v in found if not _is_pre(v)]


def _is_pre(v):
    r = versions.release(v)
    return r.is_prerelease or r.is_devrelease


def _listed(progress):
    say = progress or (lambda msg: None)
    say("listing sglang releases with pip")
    cmd = [sys.executable, "-m", "pip", "index", "versions", "--pre", PACKAGE, "--disable-pip-version-check"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        p = None
    m = re.search(r"^Available versions:\s*(.+)$", p.stdout, re.M) if p and p.returncode == 0 else None
    saved = cache_dir() / "releases.json"
    if not m:
        why = "timed out after 300 s" if p is None else (p.stderr.strip().splitlines() or ["no output"])[-1]
        if saved.is_file():
            record = json.loads(saved.read_text())
            say(f"pip could not list the releases ({why}); using the list saved on {record['listed']}")
            return record["versions"]
        raise UsageError(f"could not list the sglang releases with '{' '.join(cmd[1:])}': {why}",
                         hint="check that pip can reach your package index (pip config list)")
    found = sorted({v.strip() for v in m.group(1).split(",") if versions.release(v.strip())}, key=versions.release)
    # kept for a later run without an index (an air-gapped machine, an offline test run)
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_name(f".releases.json.{os.getpid()}")
    tmp.write_text(json.dumps({"listed": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "versions": found}))
    os.replace(tmp, saved)
    return found


def require(version, known=None, progress=None):
    """Refuse (exit 2, before any work) a ``version`` that pip does not list
    as a published sglang release; ``known``: the list, if the caller has it."""
    known = list_releases(progress, pre=True) if known is None else known
    want = versions.release(version)
    if want is not None and any(versions.release(v) == want for v in known):
        return
    newest = sorted(known, key=versions.release)[-3:]
    raise UsageError(f"sglang {version} is not a published release ({len(known)} listed by pip)",
                     hint=f"the newest are {', '.join(newest)}; python -m pip index versions {PACKAGE} "
                          "lists them all")
