"""`merge` (any machine): reports of `run` on the same servers and inputs, from separate calls (a
device call lasts 600 s at most), as one: their rows as successive rounds, the medians and ratios
over all of them.  Reports of other servers, inputs, drafters, server sharing or step definitions
are refused."""
import json
from pathlib import Path

from .. import spec_bench as bench
from .plan import Model
from .reports import REPORT, read_report

# what reports must share to be merged: the same servers on the same inputs
MERGE_KEYS = ("model", "patched_wheel", "max_new_tokens", "gpu")


def _step_definition(report):
    """A report's step definition; the reports written before the field were decode_throughput's."""
    return report.get("step_definition") or "decode_throughput"


# what else reports must share, and what it is when they do not
# (the merged report's field, its value in a report, what differs when two reports' values differ)
MERGE_LIKE = (("one_at_a_time", lambda r: bool(r.get("one_at_a_time")),
               "one measured its servers one at a time, the other side by side"),
              ("step_definition", _step_definition, "they define the step differently"),
              ("sleep_on_idle", lambda r: bool(r.get("sleep_on_idle")),
               "one ran its servers with --sleep-on-idle, the other without"))


def _drafter_sha(report):
    return (report.get("trained") or {}).get("drafter_sha256") or (report.get("training") or {}).get("sha256")


def merge(args):
    """Reports of `run` on the same servers and inputs (separate calls: a device call lasts 600 s at
    most) as one: their rows as successive rounds, medians and ratios over all of them."""
    reports = [read_report(given, "merge", "; give the --out folders of the runs") for given in args.reports]
    if len(reports) < 2:
        raise ValueError("merge: give two reports or more (the --out folders of spec_value run)")
    (f0, r0) = reports[0]
    for f, r in reports[1:]:
        for k in MERGE_KEYS:
            if r.get(k) != r0.get(k):
                raise ValueError(f"merge: {f} and {f0} differ in {k} ({r.get(k)!r} against {r0.get(k)!r}): "
                                 "measurements of other servers are not rounds of one; merge like with like")
        for _, key, why in MERGE_LIKE:
            if key(r) != key(r0):
                raise ValueError(f"merge: {f} and {f0}: {why} ({key(r)!r} against {key(r0)!r}); merge like with like")
        if _drafter_sha(r) != _drafter_sha(r0):
            raise ValueError(f"merge: {f} and {f0} measured different drafters (sha256 {_drafter_sha(r)} against "
                             f"{_drafter_sha(r0)}); merge the measurements of one trained drafter")
    rows, rnd = [], 0
    for f, r in reports:
        own = sorted({x.get("round", 1) for x in r.get("rows", [])})
        for x in r.get("rows", []):
            rows.append(dict(x, round=rnd + own.index(x.get("round", 1)) + 1, source=str(f)))
        rnd += len(own)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    merged = {k: r0.get(k) for k in MERGE_KEYS + ("date", "torch", "prompts", "training", "trained", "target")}
    merged.update(merged_from=[str(f) for f, _ in reports], rounds=rnd, rows=rows,
                  summary=bench.ratios(bench.medians(rows)), **{name: key(r0) for name, key, _ in MERGE_LIKE})
    if r0.get("model") == Model.BIG:
        merged["projection"] = bench.projection(merged["summary"])
    (out / REPORT).write_text(json.dumps(merged, indent=1) + "\n")
    md = bench.table(merged["summary"], f"{r0.get('model')}: medians over {rnd} rounds of {len(reports)} runs")
    (out / "spec_value.md").write_text(md)
    print(md)
    return 0
