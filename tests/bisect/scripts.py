"""Small test commands for the bisect machinery (real trees, cheap tests).

``version_test(path, calls, first_bad, ...)`` writes a script that reads
the tree's release version (sglang/_version.py), appends it to ``calls``,
and exits 1 from ``first_bad`` on (0 before), 125 for versions in ``skip``;
``interrupt_at=N`` sends the given signal to its parent (bisect.py) on
the N-th call, as Ctrl-C (SIGINT) or a crash (SIGKILL) would.
"""
import sys
from pathlib import Path

SCRIPT = r'''
import os, re, signal, sys
from pathlib import Path
tree = Path(sys.argv[1])
f = next(p for p in (tree / "python/sglang/_version.py", tree / "sglang/_version.py") if p.exists())
v = re.search(r"^__version__\s*(?:=\s*version\s*)?=\s*['\"]([^'\"]+)['\"]", f.read_text(), re.M).group(1)
calls = Path({calls!r})
with open(calls, "a") as fh:
    fh.write(v + "\n")
n = len(calls.read_text().splitlines())
if n == {interrupt_at}:
    os.kill(os.getppid(), {signal})
def key(s):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", s)
    return tuple(int(x or 0) for x in m.groups())
if {flip}:
    sys.exit(n % 2)
if v in {skip!r}:
    sys.exit(125)
sys.exit({code} if key(v) >= key({first_bad!r}) else 0)
'''


def version_test(path, calls, first_bad, skip=(), interrupt_at=0, signal="signal.SIGINT", flip=False, code=1):
    path = Path(path)
    path.write_text(SCRIPT.format(calls=str(calls), first_bad=first_bad, skip=list(skip),
                                  interrupt_at=interrupt_at, signal=signal, flip=flip, code=code))
    return [sys.executable, str(path), "{tree}"]


def calls(path):
    p = Path(path)
    return p.read_text().split() if p.exists() else []
