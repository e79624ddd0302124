"""The host's CPU during a measurement: how busy the machine's cores were and how much CPU time each
server's process group used (Linux /proc; stdlib only).

A speculative step of a small target lasts 1-4 ms and is host-bound, so a server measured beside
others can be slowed by them; `snapshot` before a measurement and `delta` after it say whether the
others used the CPU meanwhile (spec_value.measure keeps it in each row as `host`)."""
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class Snapshot:
    busy_s: float               # the machine's non-idle CPU time, all cores
    total_s: float              # its CPU time, idle included
    groups_s: dict              # name -> CPU time (user + system) of the process group's live processes
    at: float                   # time.monotonic() when /proc/stat was read


@dataclass(frozen=True)
class HostLoad:
    busy_cores: float           # the machine's non-idle CPU time over the interval's wall time; /proc/stat
    #                             counts in clock ticks, so it is exact to within 2 ticks a core over wall_s
    cores: int
    wall_s: float               # between the two readings of /proc/stat
    groups_cpu_s: dict          # name -> CPU seconds its group used in the interval

    def as_dict(self):
        return asdict(self)


def _tick():
    return os.sysconf("SC_CLK_TCK")


def machine_cpu(proc=PROC):
    """(busy, total) CPU seconds of the machine since boot, from /proc/stat's first line."""
    fields = [int(x) for x in (proc / "stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
    total = sum(fields[:8])                                           # guest time is inside user already
    return (total - idle) / _tick(), total / _tick()


def group_cpu(pgids, proc=PROC):
    """pgid -> CPU seconds (utime + stime) of the live processes of that process group."""
    want, out = set(pgids), {g: 0.0 for g in pgids}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:                     # exited meanwhile
            continue
        rest = stat[stat.rindex(")") + 2:].split()     # after "pid (comm) ": state ppid pgrp ...
        pgrp = int(rest[2])
        if pgrp in want:
            out[pgrp] += (int(rest[11]) + int(rest[12])) / _tick()
    return out


def snapshot(groups, proc=PROC):
    """groups: name -> process group id."""
    busy, total = machine_cpu(proc)
    at = time.monotonic()
    cpu = group_cpu(groups.values(), proc)
    return Snapshot(busy, total, {n: cpu[g] for n, g in groups.items()}, at)


def delta(before, after):
    """The load between two snapshots (groups in both)."""
    wall_s = after.at - before.at
    return HostLoad(busy_cores=round((after.busy_s - before.busy_s) / wall_s, 3) if wall_s > 0 else 0.0,
                    cores=os.cpu_count() or 1, wall_s=round(wall_s, 3),
                    groups_cpu_s={n: round(after.groups_s[n] - before.groups_s[n], 3)
                                  for n in before.groups_s if n in after.groups_s})
