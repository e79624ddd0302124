"""Signals as a terminal gives them.

Run from a terminal, a command gets SIGINT's default action, and Python turns it
into KeyboardInterrupt; a command started in the background by a shell without
job control (`pytest ... &` in a script, nohup) inherits SIGINT *ignored*, and so
does every process it starts, so a tool would never see the Ctrl-C a test sends
it (and the tools keep an ignored SIGINT ignored, as they should).  The tests that
send SIGINT start the tool as a terminal would: ``AT_A_TERMINAL + argv`` restores
SIGINT to its default, then execs (same pid, so a test's os.getppid() is still
the tool's); ``default_sigint()`` does the same for the test's own process."""
import contextlib
import signal
import sys

AT_A_TERMINAL = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                 "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"]


@contextlib.contextmanager
def default_sigint():
    """Within it, SIGINT is Python's own (KeyboardInterrupt), as under a terminal."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
