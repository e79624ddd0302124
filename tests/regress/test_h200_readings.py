"""Every H200 start-up in the project's records, from its readings of both kinds (issue 27).

The records: tools/gpu/e2e.py's runs on the H200 (tests/data/gpu_results/2026-12-01 on v0.5.12.post1 and the
stack this repository kept for it; 2026-12-02/r13, r14, r16 on pristine v0.5.13.post1, v0.5.14, v0.5.16), each with the
server's own log figures (``log_figures``: "Load weight begin" / "Load weight end ... avail mem" with two
decimals, the KV tokens, running requests and Mamba slots, or its refusal and remedies).  Each start has
a shipped scenario (``h200-*``) whose readings are the sizing's own, exact (the probe's or the patched
tree's ledger's bytes), so:

* exactly: the scenario as shipped gives the server's figures (``test_from_the_exact_bytes``);
* within rounding: the same scenario given only the log's two lines (``readings = "logged"``) gives a
  range holding the server's figures, whose whole width is the lines' rounding: the stream pool on the
  H200 is the measured 73,400,320 B and the RoPE pre-expansion is exact (``test_from_the_log_lines``).

Nothing the server printed about its sizing goes in: the log lines used are the two readings only."""

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from sgl_overlay.harness import Outcome, load_scenario, run_scenario, source_root
from sgl_overlay.harness import readings
from sgl_overlay.harness.reading_gaps import GIB, sizing_readings
from sgl_overlay.harness.remedy import parse_remedies

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_results"

RECORDS_RELEASE = "0.5.12.post1"    # the release the 2026-12-01 records ran on (its stack: patched_tree_of)

# (record file, case, run, release or "patched", the shipped scenario)
STARTS = [
    ("2026-12-01/e2e.json", "dflash-smoke", "pristine", "0.5.12.post1", "h200-dflash-smoke"),
    ("2026-12-01/e2e.json", "dflash-smoke", "patched", "patched", "h200-dflash-smoke"),
    ("2026-12-01/e2e.json", "zero-requests-dflash", "pristine", "0.5.12.post1", "h200-zero-requests-dflash"),
    ("2026-12-01/e2e.json", "zero-requests-dflash", "patched", "patched", "h200-zero-requests-dflash"),
    ("2026-12-01/e2e.json", "zero-requests-dflash", "patched+remedy", "patched", "h200-zero-requests-dflash"),
    ("2026-12-01/e2e-h200-16.json", "h200-16", "pristine", "0.5.12.post1", "h200-16"),
    ("2026-12-01/e2e-h200-16.json", "h200-16", "patched", "patched", "h200-16"),
    ("2026-12-01/e2e-dense.json", "dense", "pristine", "0.5.12.post1", "h200-dense"),
    ("2026-12-01/e2e-dense.json", "dense", "patched", "patched", "h200-dense"),
    ("2026-12-01/e2e-rope-262k.json", "rope-262k", "pristine", "0.5.12.post1", "h200-rope-262k"),
    ("2026-12-02/r13/e2e.json", "dflash-smoke", "pristine", "0.5.13.post1", "h200-dflash-smoke"),
    ("2026-12-02/r14/e2e.json", "dflash-smoke-release", "pristine", "0.5.14", "h200-dflash-smoke"),
    ("2026-12-02/r14/e2e.json", "dflash-smoke-raised", "pristine", "0.5.14", "h200-dflash-smoke"),
    ("2026-12-02/r16/e2e.json", "dflash-smoke-release", "pristine", "0.5.16", "h200-dflash-smoke"),
    ("2026-12-02/r16/e2e.json", "dflash-smoke-raised", "pristine", "0.5.16", "h200-dflash-smoke"),
    ("2026-12-02/r16/e2e.json", "dense", "pristine", "0.5.16", "h200-dense"),
]
IDS = [f"{f.split('/')[0]}-{c}-{r}-{t}" for f, c, r, t, _ in STARTS]
FIGURES = ("max_total_num_tokens", "max_running_requests", "max_mamba_cache_size")
# the flags of the command line that the scenarios' [server] tables take as fields (the runs differ in these)
FLAG_FIELDS = {"--mem-fraction-static": ("mem_fraction_static", float),
               "--max-running-requests": ("max_running_requests", int)}


def _run_record(path, case, run):
    report = json.loads((DATA / path).read_text())
    return next(c for c in report["cases"] if c["name"] == case)["runs"][run]


def _server(run) -> dict:
    """The fields the run's command line sets that the scenario's [server] holds per run, and SGLang's own
    --mem-fraction-static where the command gave none (the logged server_args)."""
    argv = shlex.split(run["command"])
    out = {field: cast(argv[argv.index(flag) + 1]) for flag, (field, cast) in FLAG_FIELDS.items() if flag in argv}
    out.setdefault("mem_fraction_static", run["log_figures"]["server_args"]["mem_fraction_static"])
    return out


def _logged(run) -> dict:
    """The server's figures: KV tokens (the target's pool), running requests, Mamba slots."""
    f = run["log_figures"]
    got = {"max_total_num_tokens": f["kv_cache"][0]["tokens"] if f["kv_cache"] else None,
           "max_running_requests": f.get("max_running_requests"),
           "max_mamba_cache_size": f["mamba_cache"][0]["max_mamba_cache_size"] if f["mamba_cache"] else None}
    return {k: v for k, v in got.items() if v is not None}


def _refusal(run) -> str | None:
    """The server's refusal (its sizing error), or None where it started or died later."""
    errors = [e for e in run["log_figures"]["errors"] if "ModuleNotFoundError" not in e]
    return errors[0] if errors and not run.get("healthy") else None


@pytest.fixture(scope="module")
def tree(release_tree, patched_tree_of):
    def get(which):
        if which == "patched":
            return patched_tree_of(RECORDS_RELEASE)
        return source_root(release_tree(which))
    return get


def _scenario(name, run, **gpu):
    sc = load_scenario(name)
    return dataclasses.replace(sc, server={**sc.server, **_server(run)}, gpu={**sc.gpu, **gpu})


def _check(report, run, both_ends):
    """The report against the server: a start's figures (exactly, or within the range's ends), a refusal's
    message and its remedy values (within the ends' values)."""
    ends = [report] + ([report.optimistic] if both_ends else [])
    refusal = _refusal(run)
    if refusal and "AssertionError" not in refusal:
        kind, _, message = refusal.partition(": ")
        for end in ends:
            assert end.outcome is Outcome.REFUSED, end.reason
        stated = [parse_remedies(e.reason) for e in ends]
        logged = run["log_figures"]["remedies"]
        if logged:   # the patched tree's "remedy: --flag = value" lines
            for i, r in enumerate(dict.fromkeys((x["flag"], x["value"]) for x in logged)):
                values = [float(s[i].value) for s in stated]
                assert min(values) <= float(r[1]) <= max(values), (r, values)
        else:        # the release's own message, whose value depends on the readings
            for s in stated:
                assert s, report.reason
            values = [float(s[0].value) for s in stated]
            (want,) = [float(x.value) for x in parse_remedies(message)]
            assert min(values) <= want <= max(values), (want, values)
            assert all(message.split(" above ")[0] in end.reason for end in ends), (message, report.reason)
        return
    logged = _logged(run)
    for end in ends:
        assert end.outcome is (Outcome.BROKEN if refusal else Outcome.OK), end.reason
    if refusal:   # broken: figures at the ends (no started run to take a range over)
        spans = {k: [e.figures.get(k) for e in ends] for k in logged}
    else:
        spans = report.range_json()["figures"] if both_ends else {k: [report.figures[k]] * 2 for k in logged}
    assert all(min(spans[k]) <= v <= max(spans[k]) for k, v in logged.items()), (spans, logged)


@pytest.mark.parametrize("path,case,run,which,name", STARTS, ids=IDS)
def test_the_scenario_s_bytes_are_the_records(path, case, run, which, name):
    """Where the run's probe recorded every reading, the scenario's readings are its sizing's, to the byte
    (and the log's two lines are those of the same start)."""
    r = _run_record(path, case, run)
    sc = load_scenario(name)
    assert sc.reading_kind is readings.ReadingKind.SIZING
    probe = (r.get("probe") or {}).get("free_readings")
    if probe and not any(x["draft"] for x in probe):
        assert (sc.gpu["pre_load_free_gib"] * GIB, sc.gpu["post_load_free_gib"] * GIB) == sizing_readings(probe)
    f = r["log_figures"]
    assert (f["load_begin_avail_gib"], f["load_end_avail_gib"]) in {(93.57, 42.31), (138.61, 87.36), (138.61, 138.06)}


@pytest.mark.parametrize("path,case,run,which,name", STARTS, ids=IDS)
def test_from_the_exact_bytes(tree, path, case, run, which, name):
    r = _run_record(path, case, run)
    report = run_scenario(tree(which), _scenario(name, r), verify_remedy=False)
    assert report.optimistic is None and report.readings["exact"]   # one run: nothing to span
    _check(report, r, both_ends=False)
    if _logged(r) and not _refusal(r):
        assert {k: report.figures[k] for k in _logged(r)} == _logged(r)


@pytest.mark.parametrize("path,case,run,which,name", STARTS, ids=IDS)
def test_from_the_log_lines(tree, path, case, run, which, name):
    r = _run_record(path, case, run)
    f = r["log_figures"]
    sc = _scenario(name, r, readings="logged", pre_load_free_gib=f["load_begin_avail_gib"],
                   post_load_free_gib=f["load_end_avail_gib"])
    report = run_scenario(tree(which), sc, verify_remedy=False)
    terms = {t["name"]: t for t in report.readings["terms"]}
    # the H200's pool is measured: the only terms with a width are the two readings' rounding (+-0.005 GiB)
    assert (terms["stream pool"]["lo_bytes"], terms["stream pool"]["hi_bytes"]) == (readings.H200_POOL_BYTES,) * 2
    assert {n for n, t in terms.items() if t["lo_bytes"] != t["hi_bytes"]} == {"rounding"}
    assert report.optimistic is not None
    _check(report, r, both_ends=True)
