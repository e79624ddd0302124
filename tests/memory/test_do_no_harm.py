"""Do no harm: the three cases (fits / over_budget / cannot_run).

Expectations come from real sizing code of three releases, never from the
patched tree's output: the pin (SGLang v0.5.17, the pristine tree), v0.5.16
(the reservation without the pools' padding slots, what the over-budget start
restores) and the scenario files.
"""

import itertools
import os

import pytest

from sgl_overlay import release_trees
from sgl_overlay.harness import Case, Outcome, load_scenario, run_child, run_scenario, source_root
from sgl_overlay.harness.remedy import parse_remedies

from tests.memory import expected as E
from tests.memory.reports import report

GIB = 1 << 30
BEFORE_PADDING = "0.5.16"  # the last release whose Mamba reservation left the padding slots out


@pytest.fixture(scope="module")
def v0516():
    return source_root(release_trees.release_tree(BEFORE_PADDING))


def figs(rep):
    f = rep["figures"]
    return f.get("max_running_requests"), f.get("max_total_num_tokens"), f.get("max_mamba_cache_size")


def test_over_budget_start_gives_v0_5_16s_figures(pristine, patched, v0516):
    """The known-good service at the fraction v0.5.14+ need (dflash-smoke-raised):
    v0.5.16 starts it, the pin refuses it, the patched tree starts it with
    v0.5.16's requests and Mamba slots, over budget, with the warning saying so,
    and more KV tokens by what v0.5.16 over-reserved for the conv windows of the
    4 intermediate slots (30 columns of 983,040 B each: 117,964,800 B, whole
    86,016 B tokens)."""
    old, pin, pat = (report(t, "dflash-smoke-raised") for t in (v0516, pristine, patched))
    assert old["outcome"] == Outcome.OK and pin["outcome"] == Outcome.REFUSED, (old["reason"], pin["reason"])
    assert pat["outcome"] == Outcome.OK, pat["reason"]
    (r0, t0, s0), (r1, t1, s1) = figs(old), figs(pat)
    assert (r1, s1) == (r0, s0) and t1 - t0 == 4 * 30 * 983040 // 86016, (figs(pat), figs(old))
    assert pat["ledger"]["figures"]["case"] == Case.OVER_BUDGET
    # the padding slots: one state slot and one intermediate slot as the pools allocate it (2.44 GiB with
    # the conv windows dense, as the pin reserves them)
    sc = load_scenario("dflash-smoke-raised")
    pad = E.mamba_bytes_per_slot(sc) + E.spec_bytes_per_slot(sc)
    assert f"{pad / GIB:.2f}" == "2.41"
    assert pat["warning"].startswith("over budget by 2.41 GiB taken from the headroom"), pat["warning"]


def test_case_fits_dense_and_lowered_default(pristine, patched):
    # dense: identical figures, case fits
    pin, pat = report(pristine, "healthy-h200-8b"), report(patched, "healthy-h200-8b")
    assert figs(pin)[:2] == figs(pat)[:2]
    assert pat["ledger"]["figures"]["case"] == Case.FITS
    # the pin refuses the DFlash default 48; the patched tree fits fewer in the budget
    assert report(pristine, "dflash-default-48")["outcome"] == Outcome.REFUSED
    rep = report(patched, "dflash-default-48")
    assert rep["outcome"] == Outcome.OK and rep["ledger"]["figures"]["case"] == Case.FITS


def test_case_cannot_run(pristine, patched):
    """Refused by the pin too; the patched tree refuses with remedies (re-run
    in test_scenarios.py): the user's 4 requests do not fit even without the
    padding slots (dflash-smoke-tight, dflash-smoke at 0.6857), and 0
    requests are never passed on (zero-requests-dflash)."""
    for name in ("dflash-smoke-tight", "dflash-smoke", "zero-requests-dflash"):
        assert report(pristine, name)["outcome"] == Outcome.REFUSED, name
        rep = report(patched, name)
        assert rep["outcome"] == Outcome.REFUSED, (name, rep["reason"])
        assert rep["remedies"] and all(r["works"] for r in rep["remedies"]), (name, rep["judgement"])
        assert rep["ledger"]["figures"]["case"] == Case.CANNOT_RUN, name


def test_strict_restores_the_refusal(patched, monkeypatch):
    monkeypatch.setenv("SGLO_MEMORY_STRICT", "1")
    rep = run_scenario(patched, load_scenario("dflash-smoke-raised"), verify_remedy=False)
    assert rep.outcome is Outcome.REFUSED
    assert "--max-running-requests 4 does not fit" in rep.error["message"]
    assert rep.case is Case.CANNOT_RUN


# -- the grid property ----------------------------------------------------
# post-load free (3) x mem_fraction_static (4) x max_running_requests (3)
# x max_mamba_cache_size (2) x DFlash on/off (2) = 144 points.  CI runs every
# 12th point in itertools.product order (12 points); SGLO_GRID_ALL=1 runs all.
POST = [43.19, 38.0, 30.0]
MFS = [0.6856901, 0.725, 0.80, 0.88]
MRR = [1, 4, 8]
SLOTS = [None, 24]
SPEC = [True, False]
GRID = list(itertools.product(POST, MFS, MRR, SLOTS, SPEC))
SAMPLE = GRID if os.environ.get("SGLO_GRID_ALL") else GRID[::12]
THREE = ("max_running_requests", "max_total_num_tokens", "max_mamba_cache_size")


def _request(post, mfs, mrr, slots, spec):
    sc = load_scenario("dflash-smoke")
    over = dict(mem_fraction_static=mfs, max_running_requests=mrr, max_mamba_cache_size=slots)
    if not spec:
        over.update(speculative_algorithm=None, speculative_draft_model_path=None,
                    speculative_dflash_block_size=None)
    req = sc.to_request(over)
    req["gpu"] = dict(req["gpu"], post_load_free_gib=post, pre_load_free_gib=post + 51.05)
    if not spec:
        req.pop("draft", None)
    return req


def _starts(res):
    f = res.get("figures") or {}
    return (res.get("completed", True) and not res.get("error")
            and all((f.get(k) or 0) >= 1 for k in THREE))


def _pools_fit(req, f) -> bool:
    """Do the static pools of these figures as allocated (padding slots, each KV
    pool's padding page, the request table) plus the activation reserve fit in
    the memory free after the weights (and the drafter)?"""
    from types import SimpleNamespace

    sc = SimpleNamespace(model=req["model"], server=req["server"], draft=req.get("draft"), gpu=req["gpu"])
    n, t, s = (f[k] for k in THREE)
    d, (_, cell) = E.draft_tokens(sc), E.kv_bytes_per_token(sc)
    pr = E.mamba_bytes_per_slot(sc)
    static = (s + 1) * pr + ((n + 1) * d * pr if d else 0) + (t + 1) * cell
    static += (n + 1) * (sc.model["context_len"] + 4 + d) * 4
    reserve = E.activation_reserve_bytes(1, sc.server["chunked_prefill_size"], bool(d), sc.server.get("cuda_graph_max_bs"))
    return static + reserve <= E.post_load_free_bytes(sc)


@pytest.mark.parametrize("point", SAMPLE, ids=lambda p: "-".join(map(str, p)))
def test_grid_do_no_harm(pristine, patched, v0516, point):
    """A point the pin starts starts on the patched tree with at least the pin's
    requests, KV tokens and Mamba slots.  A point v0.5.16 starts whose static
    pools as v0.5.16 sizes them (padding slots included) plus the activation
    reserve fit in the memory free after the weights starts with at least
    v0.5.16's figures.  Every other point is refused, each stated remedy
    re-running to a start."""
    req = _request(*point)
    pin, old, pat = (run_child(t, req) for t in (pristine, v0516, patched))
    qf = pat.get("figures") or {}
    if _starts(pin):
        assert _starts(pat), (point, (pat.get("error") or {}).get("message", "")[:300])
        assert all(qf[k] >= pin["figures"][k] for k in THREE), (point, qf, pin["figures"])
        return
    led = (pat.get("ledger") or {}).get("figures") or {}
    if _starts(old) and _pools_fit(req, old["figures"]):
        assert _starts(pat), (point, (pat.get("error") or {}).get("message", "")[:300])
        assert all(qf[k] >= old["figures"][k] for k in THREE), (point, qf, old["figures"])
        if led.get("case") == Case.OVER_BUDGET:
            # v0.5.16's requests and slots; its KV tokens or more: v0.5.16 reserved a linear draft
            # chain's conv windows dense, the stack as the pools allocate them (test_allocation.py)
            assert all(qf[k] == old["figures"][k] for k in ("max_running_requests", "max_mamba_cache_size")), (
                point, qf, old["figures"])
        return
    if _starts(pat):
        assert led.get("case") == Case.FITS, (point, led.get("case"))
        return
    assert led.get("case") == Case.CANNOT_RUN, (point, led.get("case"))
    remedies = parse_remedies(pat["error"]["message"])
    assert remedies, (point, pat["error"]["message"][-300:])
    for r in remedies:
        rr = dict(req, server=dict(req["server"], **{r.key: r.value}))
        assert _starts(run_child(patched, rr)), (point, r.flag, r.value)
