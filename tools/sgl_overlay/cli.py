"""What the command-line scripts share: progress lines, --json output,
and turning errors into exit codes."""
import argparse
import errno
import json
import os
import re
import sys
import tarfile
import tempfile
import time
import traceback
import zipfile
import zlib

from .errors import INTEGRITY, USAGE, OverlayError, UsageError


class Progress:
    """Progress lines on stderr, each with the time since the start."""

    def __init__(self, name, quiet=False):
        self.name = name
        self.quiet = quiet
        self.t0 = time.monotonic()

    def __call__(self, message):
        if not self.quiet:
            print(f"[{self.name} {time.monotonic() - self.t0:6.2f}s] {message}", file=sys.stderr, flush=True)


def python_version(text):
    """``(3, minor)`` of a ``--python`` value such as ``3.12`` (the GPU
    machine's CPython); a UsageError for anything else."""
    m = re.fullmatch(r"3\.(\d{1,2})", text)
    if not m:
        raise UsageError(f"--python {text!r} is not a CPython 3 version", hint="e.g. --python 3.12")
    return 3, int(m[1])


def add_root(parser):
    """``--root DIR``: the checkout to work on (project.find_root)."""
    parser.add_argument("--root", metavar="DIR",
                        help="the sgl-overlay checkout to work on (default: this script's checkout, or the "
                             "nearest one at or above the current directory)")


def add_output(parser, what="the result"):
    """``--json`` (``what`` as the --json document, docs/json.md) and ``-q``."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (docs/json.md)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def split_at_dashes(argv):
    """(ours, theirs): the arguments before the first ``--`` and those after
    it (a test command, SGLang's own flags); theirs is empty without one."""
    if "--" not in argv:
        return list(argv), []
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def to_json(value):
    """``json.dumps``'s ``default``: a typed value (an enum or frozen dataclass
    of the library) is written as its own ``to_json()`` gives it."""
    method = getattr(value, "to_json", None)
    if method is None:
        raise TypeError(f"{type(value).__name__} has no JSON form (no to_json method)")
    return method()


JSON_SCHEMA = 1
"""The version of every top-level --json document (docs/json.md): raised
when a key is renamed, removed or changes its meaning; a new key does not."""


def document(result, exit_code):
    """The --json document of ``result`` (a dict, or a typed value with
    ``to_json()`` giving one): its keys with ``schema`` (JSON_SCHEMA) and
    ``exit_code`` (what the command exits with) added, docs/json.md."""
    doc = result.to_json() if hasattr(result, "to_json") else result
    if not isinstance(doc, dict):
        raise TypeError(f"a --json document is an object, not {type(doc).__name__}")
    envelope = {"schema": JSON_SCHEMA, "exit_code": int(exit_code)}
    clash = {k: doc[k] for k in envelope if k in doc and doc[k] != envelope[k]}
    if clash:
        raise ValueError(f"the --json document's own {clash} differs from its envelope {envelope}")
    return {**doc, **envelope}


def emit(result, as_json, text, *, exit_code, sort_keys=True):
    """Print ``result``'s --json document (``document``), or ``text`` (a
    string) for people; returns ``exit_code``, which the command exits with.
    ``sort_keys=False`` keeps a document's own documented key order."""
    if as_json:
        print(json.dumps(document(result, exit_code), indent=2, sort_keys=sort_keys, default=to_json))
    elif text:
        print(text)
    return exit_code


def run(main, argv, as_json_flag="--json"):
    """Call ``main(argv)`` -> exit code; an OverlayError becomes its
    message (or JSON with --json) and its exit code.  Any other exception
    becomes an ``error:``/``hint:`` pair too (exit 2, or 3 for a damaged
    archive), its traceback written to a file that the hint names, never
    to the terminal."""
    as_json = as_json_flag in argv
    try:
        return main(argv)
    except OverlayError as e:
        return _report(e, as_json)
    except KeyboardInterrupt:
        return _interrupted(as_json)
    except Exception as e:  # noqa: BLE001 - the last line of defence: no traceback on the terminal
        if during_interrupt(e):
            return _interrupted(as_json)
        return _report(unexpected(e, getattr(main, "__module__", "sgl_overlay")), as_json)


INTERRUPTED = 130


def _interrupted(as_json):
    try:
        if as_json:
            print(json.dumps(document({"status": "interrupted"}, INTERRUPTED), indent=2, sort_keys=True))
        print("interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return INTERRUPTED


def during_interrupt(e):
    """Whether ``e`` was raised while a KeyboardInterrupt was on its way out
    (a clean-up that failed because Ctrl-C had also stopped a helper
    process): the run was interrupted, not broken."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__context__ or e.__cause__
    return False


def _report(e, as_json):
    try:
        if as_json:
            print(json.dumps(document({"status": "error", **e.as_dict()}, e.code), indent=2, sort_keys=True))
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass                                   # a closed terminal or pipe: the exit code still says it
    return e.code


DISK = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
        errno.EFBIG: "a file grew past the allowed size (disk full or a file size limit)",
        errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted"}


def unexpected(e, module):
    """An OverlayError for an exception no code path expected."""
    where = crash_report(e, module)
    seen = f"the traceback is in {where}" if where else "the traceback could not be written anywhere"
    if isinstance(e, OSError) and e.errno in DISK:
        path = e.filename or ""
        return OverlayError(f"{DISK[e.errno]}: {e.strerror}" + (f": {path}" if path else ""),
                            hint=f"free space or fix the permissions of that place, then run again "
                                 f"(a half-done run leaves nothing in use); {seen}", code=USAGE)
    if isinstance(e, (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError)):
        return OverlayError(f"a damaged archive: {type(e).__name__}: {e}",
                            hint=f"a cached download is corrupt: delete it from the cache (or the whole cache "
                                 f"directory) and run again; {seen}", code=INTEGRITY)
    return OverlayError(f"unexpected {type(e).__name__}: {str(e)[:500]}",
                        hint=f"{seen}; please report it with that file", code=USAGE)


def crash_report(e, module):
    """Write the traceback to a file (the cache's crash-reports/, else the
    temp directory); its path, or None."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    tool = module.rsplit(".", 1)[-1]
    name = f"{tool}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    places = []
    try:
        from .project import cache_dir
        places.append(cache_dir() / "crash-reports")
    except Exception:  # noqa: BLE001
        pass
    places.append(os.path.join(tempfile.gettempdir(), "sgl-overlay-crash-reports"))
    for d in places:
        try:
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(f"sgl-overlay {tool}: {' '.join(sys.argv)}\n\n{text}")
            return path
        except OSError:
            continue
    return None


def table(rows, headers):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*map(str, r)) for r in rows])


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are UsageError (exit 2, with a hint)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}", hint=f"see {self.prog} --help")
