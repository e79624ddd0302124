"""What the command-line scripts share: progress lines, --json output,
and turning errors into exit codes."""
import argparse
import json
import sys
import time

from .errors import OverlayError, UsageError


class Progress:
    """Progress lines on stderr, each with the time since the start."""

    def __init__(self, name, quiet=False):
        self.name = name
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, message):
        if not self.quiet:
            print(f"[{self.name} {time.monotonic() - self.t0:6.2f}s] {message}", file=sys.stderr, flush=True)


def emit(result, as_json, text):
    """Print ``result`` as JSON, or ``text`` (a string) for people."""
    if as_json:
        print(json.dumps(result, indent=2, sort_keys=True))
    elif text:
        print(text)


def run(main, argv, as_json_flag="--json"):
    """Call ``main(argv)`` -> exit code; an OverlayError becomes its
    message (or JSON with --json) and its exit code."""
    as_json = as_json_flag in argv
    try:
        return main(argv)
    except OverlayError as e:
        if as_json:
            print(json.dumps({"status": "error", **e.as_dict()}, indent=2, sort_keys=True))
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def table(rows, headers):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*map(str, r)) for r in rows])


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageError (exit 2, with a hint)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}", hint=f"see {self.prog} --help")
