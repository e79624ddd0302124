"""The child interpreter: run one request against one tree, print JSON (``protocol``).

    python -m sgl_overlay.harness.child < request.json > result.json

A request is one job (``protocol.Job``): a sizing of a scenario's tables (``run``, the result a
``protocol.SizingResult``) or a parse of server flags with the release's own ServerArgs (``flags``, a
``protocol.FlagsResult``).  Both run in the same set-up: this entry, the harness's own code compiled
once, and the import environment of ``setup.import_environment``.
stdout carries only the result; upstream's logging goes to stderr.

The process does one sizing and exits, so the cyclic garbage collector is off
for its life: importing torch (and a release's ``server_args``) builds
hundreds of thousands of objects, and the collections the allocation counts
trigger meanwhile free nothing (everything imported stays alive) while costing
about a tenth of the run.  Reference counting still frees what it frees, and a
release's own ``gc.collect()`` (v0.5.19+ ``_profile_available_bytes``) still
collects.  At the end everything is frozen (``gc.freeze``), so the final
collection the interpreter runs at exit, which would walk every object torch
made, skips them (about a third of a second).  The harness's own modules are compiled once into the code cache
(``loader.cache_own_code``) where the environment writes no bytecode.
"""

from __future__ import annotations

import gc

gc.disable()

import json  # noqa: E402 - after the collector is off
import sys  # noqa: E402
import time  # noqa: E402

T0 = time.perf_counter()


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # upstream prints go to stderr
    req = json.load(sys.stdin)
    from ..protocol import Job

    if Job.of(req) is Job.FLAGS:
        result = flags(req)
    else:
        result = run(req)
        result["timing"]["child_total_s"] = round(time.perf_counter() - T0, 4)
    out.write(json.dumps(result, default=_jsonable) + "\n")
    out.flush()
    gc.freeze()  # the interpreter's final collection at exit would walk every object torch made
    return 0


def _jsonable(o):
    torch = sys.modules.get("torch")  # a flag parse does not import it
    if torch is not None and isinstance(o, torch.dtype):
        return str(o)
    return repr(o)


def flags(req: dict) -> dict:
    """A flag parse (``Job.FLAGS``): the ServerArgs fields ``req["argv"]`` sets (``flags.parse``)."""
    from pathlib import Path

    from . import loader

    loader.cache_own_code()
    from .flags import parse

    return parse(Path(req["root"]), req["argv"]).to_json()


def run(req: dict) -> dict:
    from pathlib import Path

    t_import = time.perf_counter()
    import torch  # noqa: F401  (dominates the run; timed separately)

    torch_s = time.perf_counter() - t_import
    from . import loader

    loader.cache_own_code()
    from .. import layout
    from . import drivers
    from .errors import describe_exception

    root = Path(req["root"])
    lay = layout.detect(root)
    ledger_file = _ledger_file()
    log = _capture_log(root)
    result = {"layout": lay.era.value, "entry_module": lay.entry, "timing": {"import_torch_s": round(torch_s, 4)}}
    ctx = None
    t = time.perf_counter()
    try:
        ctx = drivers.Context(root, lay, req)
        figures = drivers.drive(ctx)
        result["completed"] = True
        result["figures"] = figures
    except BaseException as e:  # noqa: BLE001 - every failure is classified
        result["completed"] = False
        result["figures"] = ctx.figures if ctx else {}
        result["error"] = describe_exception(e, root)
    result["timing"]["sizing_s"] = round(time.perf_counter() - t, 4)
    # The ledger file (the memory-ledger patch), else the tree's in-memory ledger.
    result["ledger"] = _read_ledger(ledger_file) or (ctx.ledger if ctx is not None else None)
    result["log"] = log[-LOG_RECORDS:]
    if ctx is not None:
        result["notes"] = ctx.notes
        result["drafter_reading"] = ctx.drafter_reading
        result["readings"] = ctx.readings
        result["reads"] = sorted(ctx.reads)
    result["standins_touched"] = len(loader.StubRegistry.touched)
    if ctx is not None:
        ctx.close()  # the result is complete: the finder and the stand-ins go, not left to the exit
    return result


# What upstream logged during the run (its ``sglang.*`` loggers, INFO and
# above): the evidence of what a user would have seen.  WARNING and above
# still reach stderr as before.
LOG_RECORDS = 200


def _capture_log(root):
    import logging
    import os

    records = []

    class Keep(logging.Handler):
        def emit(self, rec):
            try:
                where = os.path.relpath(rec.pathname, root)
            except ValueError:
                where = rec.pathname
            records.append({"level": rec.levelname, "logger": rec.name, "message": rec.getMessage(),
                            "where": f"{where}:{rec.lineno}"})

    log = logging.getLogger("sglang")
    log.setLevel(logging.INFO)
    log.addHandler(Keep(logging.INFO))
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.handlers[-1].setLevel(logging.WARNING)
    return records


# The memory-ledger patch's environment variable (docs/memory.md): a tree that
# has the patch writes its sizing ledger there as JSON; others ignore it.
LEDGER_ENV = "SGLO_MEMORY_LEDGER"


def _ledger_file():
    import os
    import tempfile

    fd, path = tempfile.mkstemp(prefix="sglo-ledger-", suffix=".json")
    os.close(fd)
    os.unlink(path)  # the tree creates it; absent afterwards = no ledger
    os.environ[LEDGER_ENV] = path
    return path


def _read_ledger(path):
    """The JSON ledger the tree wrote, or None (a tree without the patch)."""
    import os

    if not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            return json.load(fh)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
