"""tools/regress.py on the memory scenarios: exit status and the JSON report."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _regress(tree, scenario):
    proc = subprocess.run([sys.executable, "tools/regress.py", "--tree", str(tree), "--scenario", scenario, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


def test_zero_requests_exit_status_and_json(pristine, patched):
    rc, rep = _regress(pristine, "zero-requests-dflash")
    assert rc == 1 and rep["outcome"] == "refused" and rep["ledger"] is None
    assert rep["remedies"] == [], "the pin's refusal gives no value to re-run"
    rc, rep = _regress(patched, "zero-requests-dflash")
    assert rc == 0, rep["judgement"]
    assert rep["ledger"]["outcome"] == "refused"
    assert rep["remedies"] and all(r["works"] for r in rep["remedies"])
    assert rep["remedies"][0]["rerun_ledger"]["outcome"] == "ok"
