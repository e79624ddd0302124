"""tools/gpu/host_load.py on this machine's own /proc: a process group that computes is charged
CPU time, one that sleeps is charged (next to) none, and the machine's busy cores count the work;
and /proc/stat and /proc/PID/stat read as the kernel documents them (proc(5))."""
import subprocess
import sys
import time

import pytest

from tools.gpu import host_load


# each child says "ready" once its interpreter has started, so that the first snapshot is taken after
# the start-up's own CPU (0.06 s on a loaded 2-core machine: charged to the idle child, it failed CI)
BUSY = "import itertools\nprint('ready', flush=True)\nfor _ in itertools.count(): pass\n"
IDLE = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


@pytest.fixture
def groups():
    procs = {n: subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                 stdout=subprocess.PIPE, text=True)
             for n, code in (("busy", BUSY), ("idle", IDLE))}
    for p in procs.values():
        assert p.stdout.readline() == "ready\n"
    yield {n: p.pid for n, p in procs.items()}
    for p in procs.values():
        p.kill()
        p.wait()


def test_groups_are_charged_what_they_used(groups):
    before = host_load.snapshot(groups)
    t0 = time.time()
    # wait for the busy group to have used 0.2 s of CPU, however loaded this machine is
    while host_load.group_cpu([groups["busy"]])[groups["busy"]] - before.groups_s["busy"] < 0.2:
        assert time.time() - t0 < 120, "the busy child got no CPU in 120 s"
        time.sleep(0.05)
    load = host_load.delta(before, host_load.snapshot(groups))
    assert load.groups_cpu_s["busy"] >= 0.2
    # a sleeping process is charged no CPU however loaded the machine is; the kernel's accounting
    # may still put a tick on it at each end (the print's return, the next wake-up)
    assert load.groups_cpu_s["idle"] <= 2 / host_load._tick(), load
    # /proc/stat counts clock ticks: exact to within a tick a core at each end of the interval
    slack = 2 * load.cores / host_load._tick() / load.wall_s
    assert 0 < load.busy_cores <= load.cores + slack, load
    assert load.wall_s > 0
    assert set(load.as_dict()) == {"busy_cores", "cores", "wall_s", "groups_cpu_s"}


def test_proc_formats(tmp_path):
    """A command name with spaces and parentheses does not shift the fields after it."""
    (tmp_path / "stat").write_text("cpu  100 5 50 800 20 0 5 0 0 0\ncpu0 1 2 3 4\n")
    busy, total = host_load.machine_cpu(tmp_path)
    tick = host_load._tick()
    assert (busy, total) == (pytest.approx(160 / tick), pytest.approx(980 / tick))
    d = tmp_path / "4242"
    d.mkdir()
    fields = ["S", "1", "777", "777", "0", "-1", "0", "0", "0", "0", "0", "300", "40"] + ["0"] * 30
    (d / "stat").write_text("4242 (a (b) c) " + " ".join(fields) + "\n")
    (tmp_path / "self").mkdir()
    assert host_load.group_cpu([777, 778], tmp_path) == {777: pytest.approx(340 / tick), 778: 0.0}
