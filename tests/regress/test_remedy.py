"""The one remedy parser (sgl_overlay.harness.remedy), on the refusals recorded on an H200
(tests/gpu/data, tests/data/gpu_results) and the forms its two readers need: the harness (every
shape, typed values) and the GPU check's log parser (tools/gpu/e2e_log.py: the machine lines,
their values as written)."""
import dataclasses
import json

import pytest

from sgl_overlay.harness import Relation, Remedy, parse_remedies, parse_remedy
from sgl_overlay.harness.remedy import machine_remedies
from tests.by_path import ROOT
from tests.gpu.e2e_script import e2e_log

H200 = ROOT / "tests" / "gpu" / "data" / "h200-2026-12-01"
RESULTS = ROOT / "tests" / "data" / "gpu_results"


def test_the_patched_refusals_lines_recorded_on_the_h200():
    # zero-requests-dflash.patched.log: MemoryBudgetError, then "remedy: --max-running-requests = 1" and
    # "remedy: --mem-fraction-static = 0.726" (the kept log repeats them: its head and its last 60 lines)
    got = machine_remedies((H200 / "zero-requests-dflash.patched.log").read_text())
    assert [(r.flag, r.key, r.value, r.relation, r.text) for r in got] == 2 * [
        ("--max-running-requests", "max_running_requests", 1, Relation.SET, "1"),
        ("--mem-fraction-static", "mem_fraction_static", 0.726, Relation.SET, "0.726")]
    assert got[0].source == "remedy: --max-running-requests = 1"
    assert got[1].argv() == ["--mem-fraction-static", "0.726"]


def test_upstreams_refusal_recorded_on_the_h200_names_the_bound_not_the_current_value():
    # v0.5.14's refusal of dflash-smoke (tests/data/gpu_results/2026-12-02/r14): the message names the
    # current --mem-fraction-static=0.6856901 first, then the bound
    line = next(l for l in (RESULTS / "2026-12-02" / "r14" / "dflash-smoke-release.pristine.log").read_text().splitlines()
                if l.startswith("ValueError: Loaded weights leave no GPU memory"))
    r = parse_remedy(line)
    assert (r.flag, r.value, r.relation, r.text) == ("--mem-fraction-static", 0.587, Relation.ABOVE, "0.587")
    assert r.source == "Raise --mem-fraction-static above 0.587"
    assert machine_remedies(line) == []


def test_the_gpu_checks_log_reading_gives_the_reports_form():
    # the figures the check recorded for the same start-ups (tests/data/gpu_results/2026-12-01/e2e.json)
    report = json.loads((RESULTS / "2026-12-01" / "e2e.json").read_text())
    recorded = {(c["name"], t): r["log_figures"]["remedies"] for c in report["cases"] for t, r in c["runs"].items()}
    assert recorded[("zero-requests-dflash", "patched")] == [{"flag": "max-running-requests", "value": "1"},
                                                              {"flag": "mem-fraction-static", "value": "0.726"}]
    f = e2e_log.parse_log((H200 / "zero-requests-dflash.patched.log").read_text())
    assert f["remedies"] == 2 * recorded[("zero-requests-dflash", "patched")]
    assert e2e_log.outcome({"healthy": False, "log_figures": f}) == "refused"
    # upstream's bound is no line to re-run with, but it makes the start-up a refusal
    pristine = e2e_log.parse_log((RESULTS / "2026-12-02" / "r14" / "dflash-smoke-release.pristine.log").read_text())
    assert pristine["remedies"] == []
    assert e2e_log.outcome({"healthy": False, "log_figures": pristine}) == "refused"


@pytest.mark.parametrize("text, want", [
    # the check's reading: a line with blanks around it, and a value that is a word
    ("  remedy: --mem-fraction-static = 0.7200  \n", ("--mem-fraction-static", 0.72, "0.7200")),
    ("remedy: --mamba-scheduler-strategy = no_buffer", ("--mamba-scheduler-strategy", "no_buffer", "no_buffer")),
    # the harness's: no blanks around "="
    ("remedy:--max-running-requests=3", ("--max-running-requests", 3, "3")),
])
def test_the_machine_line_in_every_form_its_readers_accept(text, want):
    [r] = parse_remedies(text)
    assert (r.flag, r.value, r.text, r.relation) == (*want, Relation.SET)


@pytest.mark.parametrize("text, want", [
    ("Raise --mem-fraction-static to at least 0.8", ("--mem-fraction-static", 0.8, Relation.ABOVE)),
    ("Lower --chunked-prefill-size below 4096.", ("--chunked-prefill-size", 4096, Relation.BELOW)),
    ("lower --max-running-requests to at most 8", ("--max-running-requests", 8, Relation.BELOW)),
    ("Please set --max-total-tokens to 65536", ("--max-total-tokens", 65536, Relation.SET)),
    ("use --cuda-graph-max-bs 16 instead", ("--cuda-graph-max-bs", 16, Relation.SET)),
])
def test_the_prose_shapes(text, want):
    r = parse_remedy(text)
    assert (r.flag, r.value, r.relation) == want


def test_machine_lines_come_before_prose_and_prose_gives_one():
    msg = "Raise --mem-fraction-static above 0.770\nremedy: --mem-fraction-static = 0.78\n"
    assert [(r.value, r.relation) for r in parse_remedies(msg)] == [(0.78, Relation.SET)]
    assert len(parse_remedies("Raise --a above 1. Raise --b above 2.")) == 1


def test_a_remedy_is_frozen_and_its_report_form_is_the_harness_one():
    r = parse_remedy("remedy: --max-running-requests = 3")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 4
    assert isinstance(r, Remedy)
    # docs/regress.md's `remedies[].parsed`: these keys, the relation as its word
    assert json.loads(json.dumps(r.to_dict())) == {"flag": "--max-running-requests", "key": "max_running_requests",
                                                   "value": 3, "relation": "set",
                                                   "source": "remedy: --max-running-requests = 3"}
