"""The GPU check with stand-in processes, for tests/gpu/test_e2e_groups.py:

  python -m tests.gpu.standin_check WORK OUT PORT        (from the repository root)

runs one case with a blocker (zero-requests-dflash, the pristine tree) through the check's
own code (e2e_cases.run_case under process_groups.GROUPS.tied(), as e2e.main runs it), where
the server (WORK/pristine/sglang/launch_server.py) and the blocker (e2e_server.BLOCKER) are
stand-ins: each starts a grandchild, records both pids (STANDIN_PIDS/<role>.<pid>), and
sleeps forever.  The server never answers /health, so the case waits for it until killed."""
import sys
import time
from pathlib import Path

from tests.gpu.e2e_script import e2e_cases, e2e_server, process_groups

# a process that starts a grandchild, records "ROLE PID GRANDCHILD_PID", and sleeps forever
STANDIN = r'''
import os, subprocess, sys, time
role = {role!r}
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(60)"])
folder = os.environ["STANDIN_PIDS"]
tmp = os.path.join(folder, f".{{role}}.{{os.getpid()}}")
with open(tmp, "w") as f:
    f.write(f"{{os.getpid()}} {{child.pid}}\n")
os.rename(tmp, os.path.join(folder, f"{{role}}.{{os.getpid()}}"))
print(f"{{role}}: stand-in, holds nothing", flush=True)
while True:
    time.sleep(60)
'''


def standin(role):
    return STANDIN.format(role=role)


def prepare(work):
    """The stand-in server as the pristine tree's sglang.launch_server, and the models' folders."""
    pkg = work / "pristine" / "sglang"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(standin("server"))
    models = {"big": work / "models" / "big", "draft": work / "models" / "draft"}
    for p in models.values():
        p.mkdir(parents=True, exist_ok=True)
    return models


def main(work, out, port):
    work, out = Path(work), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    models = prepare(work)
    e2e_server.BLOCKER = standin("blocker")
    with process_groups.GROUPS.tied():
        e2e_cases.run_case("zero-requests-dflash", ["pristine"], work, out, models, int(port) - 1, 3600, time.time())


if __name__ == "__main__":
    main(*sys.argv[1:])
