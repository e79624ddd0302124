"""The servers of a `run`, each a process group of its own (process_groups.GROUPS): started with
their environment (the probe's phases, the torch profiler's folder, the configuration's own),
waited for, shut down, their logs parsed and appended to OUT/servers.log."""
import time
from pathlib import Path

from .. import e2e_log
from .. import e2e_server
from ..e2e_server import Tree
from .plan import file_name, launch_flags
from .progress import log


class Servers:
    """The check's servers, each a process group (GROUPS): started, waited for, shut down."""

    def __init__(self, work, out, tree=Tree.PATCHED):
        self.work, self.out, self.tree, self.live = Path(work), Path(out), tree, {}

    def start(self, cfg, model, flags, port, common):
        """Configuration `cfg`'s server (named by it), with its environment (Config.env)."""
        name = cfg.name
        f = file_name(name)
        log_full = self.work / f"{f}.log.full"
        env = e2e_server.server_env(self.tree, self.work, self.work / f"{f}.ledger.json", self.work / "probe" / f,
                                    {"SGLO_E2E_PHASES": "1", "SGLANG_TORCH_PROFILER_DIR": str(self.work / "traces" / f),
                                     **cfg.env})
        p, base, cmd = e2e_server.start_server(self.tree, self.work, model, launch_flags(flags, port, common), log_full,
                                               port, (), env)
        self.live[name] = {"p": p, "base": base, "t0": time.time(), "run": {"command": cmd}, "log": log_full}
        return base

    def groups(self):
        """name -> process group id of every live server (each is its own group: GROUPS)."""
        return {n: s["p"].pid for n, s in self.live.items()}

    def wait(self, names, timeout):
        for n in names:
            s = self.live[n]
            s["run"]["healthy"] = e2e_server.wait_healthy(s["p"], s["base"], timeout, s["t0"])
            s["run"]["start_s"] = round(time.time() - s["t0"], 1)
            log(f"{n}: {'healthy' if s['run']['healthy'] else 'NOT healthy'} after {s['run']['start_s']} s")
        return all(self.live[n]["run"]["healthy"] for n in names)

    def stop(self, name):
        s = self.live.pop(name)
        e2e_server.shutdown(s["p"], s["run"])
        text = s["log"].read_text(errors="replace")
        s["run"]["log_figures"] = e2e_log.parse_log(text)
        with open(self.out / "servers.log", "a") as f:      # one file: a device call returns 8 at most
            f.write(f"===== {name}: {s['run']['command']}\n" + e2e_server.trim_log(text))
        return s["run"]

    def stop_all(self, runs):
        for n in list(self.live):
            runs[n] = self.stop(n)
