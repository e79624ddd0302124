"""Run one probe against one SGLang tree in a fresh interpreter.

    python -m tests.ddtree_integration.child < {"root": ..., "probe": ..., "args": {...}[, "module": ...]}

(``module``: the probes' module, default tests.ddtree_integration.probes.)

The targeted loader of the regression harness (tools/sgl_overlay/harness/child/loader.py)
executes only the modules a probe names from the tree; every other ``sglang.*``
module is an inert stand-in.  A fresh interpreter per probe keeps the pristine
and patched trees (and their registries) apart.  stdout carries one JSON line.
"""

from __future__ import annotations

import json
import sys
import traceback


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr  # upstream prints and logging go to stderr
    req = json.load(sys.stdin)
    import importlib

    probes = importlib.import_module(req.get("module", "tests.ddtree_integration.probes"))
    try:
        result = {"ok": True, "value": getattr(probes, req["probe"])(req["root"], **req.get("args", {}))}
    except Exception as e:  # noqa: BLE001 - the probe's failure is the result
        result = {
            "ok": False,
            "type": type(e).__name__,
            "message": str(e),
            "traceback": traceback.format_exc()[-3000:],
        }
    out.write(json.dumps(result, default=repr) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
