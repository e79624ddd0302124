"""Every process a GPU check starts ends with the check (tools.gpu.e2e).

A server is started in a process group of its own (a new session), so that a
clean shutdown's SIGINT reaches its scheduler and detokenizer processes and
nothing else; the memory blocker and the checks' helper interpreters the same.
Such groups outlive the check unless something ends them: on the H200 a
`timeout 420` ended e2e.py and left a scheduler (18 GiB) and the blocker
(72 GiB) holding the GPU.  Here one registry (GROUPS) knows every group the
check started, and three things end them:

- within GROUPS.tied() (e2e.main): SIGINT and SIGTERM kill every group, then
  have their previous effect (KeyboardInterrupt, or death by SIGTERM); leaving
  it, by a return or an exception, kills them too;
- the check's death by SIGKILL (or any death): a watcher process, in a session
  of its own, holds the read end of a pipe the check writes each group to; at
  end of file (the check is gone, however) it kills the groups still listed;
- on Linux each started process also has PR_SET_PDEATHSIG (SIGKILL): it dies
  with the thread that started it, even if the watcher is gone.

Standard library only (run on the GPU machine with plain python3).  Linux and
macOS; the parent-death signal is Linux's alone.
"""
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1      # linux/prctl.h

# The watcher: "+PGID" registers a group, "-PGID" forgets it; at end of file
# (the check has ended, however it ended) every group still registered is killed.
WATCHER = r'''
import os, signal, sys
groups = set()
for line in sys.stdin:
    sign, pgid = line[0], int(line[1:])
    (groups.add if sign == "+" else groups.discard)(pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
'''


def _die_with_parent(parent):
    """A preexec_fn: the child gets SIGKILL when the thread that started it ends
    (Linux; prctl is looked up here, in the parent); if that parent is already
    gone, the child ends at once."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None

    def setup():
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
    return setup


class Registry:
    """The process groups one check started; kill_all() ends them all."""

    def __init__(self):
        self._groups = {}          # pgid -> the Popen of its leader
        self._watcher = None

    def popen(self, cmd, **kw):
        """subprocess.Popen in a new session, its group registered until release()."""
        kw.pop("start_new_session", None)
        kw.setdefault("preexec_fn", _die_with_parent(os.getpid()))
        self._watch()
        p = subprocess.Popen(cmd, start_new_session=True, **kw)
        self._groups[p.pid] = p
        self._tell(f"+{p.pid}")
        return p

    def run(self, cmd, check=False, capture_output=False, **kw):
        """subprocess.run through popen(): the same result; when the command has ended,
        what it left running is killed (its output pipes then close)."""
        if capture_output:
            kw.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p = self.popen(cmd, **kw)
        try:
            while True:
                try:
                    out, err = p.communicate(timeout=1)
                    break
                except subprocess.TimeoutExpired:
                    if p.poll() is not None:        # ended, and a child of it still holds a pipe
                        self.signal_group(p, signal.SIGKILL)
        finally:
            self.release(p)
        res = subprocess.CompletedProcess(p.args, p.returncode, out, err)
        if check:
            res.check_returncode()
        return res

    def signal_group(self, p, sig):
        """Send sig to p's group; False if the group has no process left."""
        try:
            os.killpg(p.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def release(self, p):
        """p's group is done with: whatever of it is left is killed, and it is forgotten
        (the watcher too, once no group is left: a later popen starts another)."""
        self.signal_group(p, signal.SIGKILL)
        if p.poll() is None:
            p.kill()
            p.wait()
        if self._groups.pop(p.pid, None) is not None:
            self._tell(f"-{p.pid}")
        if not self._groups and self._watcher is not None:
            w, self._watcher = self._watcher, None
            try:
                w.stdin.close()
            except OSError:
                pass
            w.wait()

    def kill_all(self):
        """SIGKILL to every registered group (the leaders are then waited for)."""
        for p in list(self._groups.values()):
            self.release(p)

    @contextlib.contextmanager
    def tied(self):
        """Within it, SIGINT and SIGTERM first end every group, then have their previous
        effect (KeyboardInterrupt, or death by SIGTERM); leaving it by any exit ends them
        too, and the previous handlers are back.  The handlers from the main thread alone;
        a signal that is ignored stays ignored; from another thread, the exit alone."""
        previous = {}
        main = threading.current_thread() is threading.main_thread()
        for sig in (signal.SIGINT, signal.SIGTERM) if main else ():
            prev = signal.getsignal(sig)
            if prev is not signal.SIG_IGN:
                previous[sig] = prev
                signal.signal(sig, self._handler(prev))
        try:
            yield self
        finally:
            self.kill_all()
            for sig, prev in previous.items():
                signal.signal(sig, prev)

    def _handler(self, prev):
        def on_signal(signum, frame):
            self.kill_all()
            if callable(prev):
                return prev(signum, frame)      # e.g. Python's KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)        # the signal's own effect: the process ends by it
        return on_signal

    def _watch(self):
        if self._watcher is not None and self._watcher.poll() is None:
            return
        self._watcher = subprocess.Popen([sys.executable, "-c", WATCHER], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, text=True)
        for pgid in self._groups:
            self._tell(f"+{pgid}")

    def _tell(self, line):
        if self._watcher is None:
            return
        try:
            self._watcher.stdin.write(line + "\n")
            self._watcher.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass        # the watcher is gone: the handlers and the parent-death signal remain


GROUPS = Registry()
