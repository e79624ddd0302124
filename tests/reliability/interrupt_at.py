"""Run ``sgl-overlay ARGS...`` with a Ctrl-C delivered at one chosen moment
of unpacking the release into the git index (archive.unpack_to_index): when
the NTH path is handed to ``git update-index --stdin``.  A terminal's Ctrl-C
reaches every process of the foreground group; which one acts first is up
to the scheduler, so each order is made here on purpose, never by a sleep:

  helper-first  git dies of SIGINT (and is seen dead), then this process gets it
  helper-only   git dies of SIGINT, this process never gets one

Usage: python -P interrupt_at.py ORDER NTH COMMAND ARGS..."""
import os
import signal
import sys

from sgl_overlay import __main__ as entry, gitcmd


def _dead(pid):
    """Whether ``pid`` (a child not reaped yet) has exited: a zombie."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1][0] == "Z"


def main(order, nth, argv):
    real = gitcmd.popen

    def popen(cwd, *args, **kw):
        p = real(cwd, *args, **kw)
        if args[:1] != ("update-index",):
            return p
        write, count = p.stdin.write, [0]

        def hooked(data):
            count[0] += 1
            if count[0] == nth:
                os.kill(p.pid, signal.SIGINT)
                while not _dead(p.pid):
                    os.sched_yield()
                if order == "helper-first":
                    os.kill(os.getpid(), signal.SIGINT)
            return write(data)

        p.stdin.write = hooked
        return p

    gitcmd.popen = popen
    return entry.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
