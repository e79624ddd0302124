"""Fresh child interpreters without paying for torch each time: a zygote.

Every harness run is a child interpreter (``python -P -m MODULE``, request
on stdin, result on stdout) so that nothing one tree imports or patches can
reach another run.  Most of such a child's time is ``import torch`` (about
2.3 s of 3 on the 2-core machine); a scenario's span runs up to 14 children
and the planner's search hundreds.  A zygote is an interpreter started the
same way, with the same environment, that imports torch (and nothing of a
tree, nothing of SGLang) and then waits; each run is a ``fork`` of it that
takes the run's pipes as its stdin, stdout and stderr and runs the module as
``-m`` would.  What a run imports, patches or leaves behind dies with its
fork; the zygote itself never runs a request.

``run(cmd, input=..., env=..., timeout=...)`` has ``subprocess.run``'s
arguments and result (``capture_output=True, text=True``), so it is a
``launch`` for ``harness.run.run_child``.  A command not of the form
``[python, "-P", "-m", MODULE]``, a platform without ``os.fork`` or
``socket.send_fds``, or ``SGL_OVERLAY_FRESH_CHILDREN=1`` in the
environment runs it with ``subprocess.run`` itself.

Zygotes are kept per (interpreter, environment but ``VOLATILE``; each run is
given its own environment exactly), one per run in flight
(the planner runs several at once), at most ``CAP`` alive in all (the
machine's cores, at least 2; a run beyond waits for one; ``_Pool``), and
end with this process: each blocks
on its control socket, whose end-of-file (this process exited, or was
killed) makes it kill the run in progress and exit; a run asks the kernel
to kill it should its zygote die first.  Nothing is written to disk.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

FRESH_ENV = "SGL_OVERLAY_FRESH_CHILDREN"   # "1": a new interpreter for every run, no zygote
# Variables that change from one run to the next without changing what the preload did: a
# zygote serves runs that differ in them, and each run gets its own (pytest names the
# current test in PYTEST_CURRENT_TEST, so keyed on it every test started a new zygote).
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})
PRELOAD = ("torch",)                       # what a zygote imports before it waits
_control_fd = None                         # in a zygote: its end of the control socket


# --------------------------------------------------------------------------
# the caller's side

class _Zygote:
    def __init__(self, python: str, env: dict):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [python, "-P", "-c", f"from sgl_overlay.harness.zygote import serve; serve({theirs.fileno()})"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.reader = self.sock.makefile("r", encoding="utf-8")
        ready = self.reader.readline()
        if ready.strip() != "ready":
            self.close()
            raise OSError("the zygote did not start")
        self.proc.stderr.close()                # read by nobody from here on: nothing may block on it
        self.proc.stderr = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, module: str, data: str, timeout, env: dict) -> subprocess.CompletedProcess:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        request = json.dumps({"module": module, "env": env}).encode() + b"\n"
        try:
            socket.send_fds(self.sock, [request], [in_r, out_w, err_w])
            line = self.reader.readline()
        except OSError:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        if not line:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            raise OSError("the zygote ended before the run started")
        pid = int(json.loads(line)["pid"])
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            stdout, stderr, timed_out = _communicate(in_w, out_r, err_r, data.encode(), deadline)
        except BaseException:
            _kill(pid)
            self.reader.readline()
            raise
        if timed_out:
            _kill(pid)
        line = self.reader.readline()
        if not line:
            raise RuntimeError("the zygote ended during a run")
        code = int(json.loads(line)["returncode"])
        out, err = stdout.decode(errors="replace"), stderr.decode(errors="replace")
        if timed_out:
            raise subprocess.TimeoutExpired(module, timeout, output=out, stderr=err)
        return code, out, err

    def close(self):
        """End the zygote: the end of its control socket is its signal to exit (the
        reader made by makefile holds the socket open until it is closed too)."""
        try:
            self.reader.close()
            self.sock.close()
        finally:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _communicate(in_w, out_r, err_r, data: bytes, deadline):
    """Write ``data`` to the run's stdin and read its stdout and stderr to
    their ends, as ``Popen.communicate`` does; (stdout, stderr, timed out)."""
    chunks = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    os.set_blocking(in_w, False)
    if data:
        sel.register(in_w, selectors.EVENT_WRITE)
    else:
        os.close(in_w)
    sel.register(out_r, selectors.EVENT_READ)
    sel.register(err_r, selectors.EVENT_READ)
    pos, timed_out = 0, False
    try:
        while sel.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                timed_out = True
                break
            for key, _ in sel.select(wait):
                fd = key.fd
                if fd == in_w:
                    try:
                        pos += os.write(in_w, data[pos:pos + 65536])
                    except BrokenPipeError:
                        pos = len(data)
                    if pos >= len(data):
                        sel.unregister(in_w)
                        os.close(in_w)
                else:
                    chunk = os.read(fd, 65536)
                    if chunk:
                        chunks[fd].append(chunk)
                    else:
                        sel.unregister(fd)
                        os.close(fd)
    finally:
        for key in list(sel.get_map().values()):
            os.close(key.fd)
        sel.close()
    return b"".join(chunks[out_r]), b"".join(chunks[err_r]), timed_out


class _Pool:
    """This process's zygotes: at most ``cap`` alive in all (each holds an
    imported torch, about 220 MB), for whatever environments.  A run takes an
    idle one of its environment, else starts one, evicting the longest idle
    zygote of another environment once ``cap`` are alive; when all are busy
    it waits for one, which on a machine of that many cores costs less than
    a new interpreter would.  (A pool per environment without a bound kept a
    zygote for every environment a long test session had used: a CI worker
    was killed for its memory.)"""

    def __init__(self, cap: int):
        self.cap, self.idle, self.alive = cap, [], 0     # idle: [(key, zygote)], the longest idle first
        self.cond = threading.Condition()

    def take(self, key, start):
        evicted = None
        with self.cond:
            while True:
                mine = [i for i, (k, _) in enumerate(self.idle) if k == key]
                if mine:
                    return self.idle.pop(mine[-1])[1]
                if self.alive < self.cap:
                    break
                if self.idle:
                    evicted = self.idle.pop(0)[1]
                    break
                self.cond.wait()
            if evicted is None:
                self.alive += 1
        if evicted is not None:
            evicted.close()                      # its place is this run's: alive stays the same
        try:
            return start()
        except BaseException:
            self.drop()
            raise

    def give(self, key, z):
        with self.cond:
            self.idle.append((key, z))
            self.cond.notify_all()

    def drop(self):
        with self.cond:
            self.alive -= 1
            self.cond.notify_all()


CAP = max(2, os.cpu_count() or 2)           # zygotes alive in this process
_pool = _Pool(CAP)


def _usable() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "send_fds") and hasattr(os, "fork")


def run(cmd, input=None, capture_output=True, text=True, env=None, timeout=None, **kw):
    """``subprocess.run(cmd, ...)`` for a harness child, forked from a zygote
    where it can be (module docstring)."""
    env = dict(os.environ if env is None else env)

    def fresh():
        return subprocess.run(cmd, input=input, capture_output=capture_output, text=text, env=env,
                              timeout=timeout, **kw)

    zygote_form = (len(cmd) == 4 and cmd[1:3] == ["-P", "-m"] and capture_output and text and not kw)
    if not zygote_form or env.get(FRESH_ENV) == "1" or not _usable():
        return fresh()
    key, pool = (cmd[0], tuple(sorted((k, v) for k, v in env.items() if k not in VOLATILE))), _pool
    try:
        z = pool.take(key, lambda: _Zygote(cmd[0], env))
    except OSError:                             # no zygote starts here: a fresh interpreter, as without one
        return fresh()
    try:
        if not z.alive():
            raise OSError("the zygote has ended")
        code, out, err = z.run(cmd[3], input or "", timeout, env)
    except subprocess.TimeoutExpired:
        pool.give(key, z)
        raise
    except OSError:                             # the zygote was gone before the run began
        z.close()
        pool.drop()
        return fresh()
    except BaseException:
        z.close()
        pool.drop()
        raise
    pool.give(key, z)
    return subprocess.CompletedProcess(cmd, code, out, err)


# --------------------------------------------------------------------------
# the zygote's side

def _die_with_parent():
    """Ask the kernel for SIGKILL when the zygote (this process's parent) dies."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _become_the_run(module: str, env: dict, fds) -> None:
    """In the fork: the run's environment, its pipes as fds 0-2, the module run as ``-m`` runs
    it; never returns."""
    code = 1
    try:
        _die_with_parent()
        os.environ.clear()
        os.environ.update(env)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        os.close(_control_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
        import runpy

        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:                   # noqa: BLE001 - as the interpreter would: traceback, exit 1
            import traceback

            traceback.print_exc()
            code = 1
        import atexit

        atexit._run_exitfuncs()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:                   # noqa: BLE001 - the run's reader may be gone
                pass
        os._exit(code)


def serve(control_fd: int) -> None:
    """The zygote: preload, say ready, then fork one run per request until
    the control socket ends."""
    import gc

    global _control_fd
    _control_fd = control_fd
    gc.disable()                                # as the harness child does: a one-shot interpreter's collector
    for name in PRELOAD:
        __import__(name)
    gc.freeze()
    sock = socket.socket(fileno=control_fd)
    sock.sendall(b"ready\n")
    while True:
        try:
            buf, fds, _flags, _addr = socket.recv_fds(sock, 65536, 3)
            while buf and not buf.endswith(b"\n"):    # the rest of a long request (its environment)
                more = sock.recv(65536)
                if not more:
                    break
                buf += more
        except OSError:
            break
        if not buf.endswith(b"\n") or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            break
        request = json.loads(buf)
        pid = os.fork()
        if pid == 0:
            _become_the_run(request["module"], request["env"], fds)
        for fd in fds:
            os.close(fd)
        sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        status = _wait_or_parent_gone(sock, pid)
        if status is None:
            break
        sock.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    sock.close()


def _wait_or_parent_gone(sock, pid):
    """The run's wait status; None (the run killed) when the control socket
    ends first: the caller is gone."""
    pidfd = os.pidfd_open(pid)
    try:
        sel = selectors.DefaultSelector()
        sel.register(pidfd, selectors.EVENT_READ)
        sel.register(sock, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fd == pidfd:
                    return os.waitpid(pid, 0)[1]
                if not sock.recv(1, socket.MSG_PEEK):   # end of file: the caller exited or was killed
                    _kill(pid)
                    os.waitpid(pid, 0)
                    return None
    finally:
        os.close(pidfd)
