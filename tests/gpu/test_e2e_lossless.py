"""Lossless speculation's comparison, margins, acceptance and the run plan/report
(tools/gpu/e2e_lossless.py, e2e_lossless_runs.check_lossless / lossless_table) on CPU, with
/generate answers in the format SGLang's tokenizer manager writes (as read in v0.5.12.post1's; the
H200 records keep the verdicts, not the answers)
(`output_top_logprobs`: (logprob, token id, None) per candidate with
--skip-tokenizer-init; `spec_verify_ct`, `completion_tokens`, `spec_num_correct_drafts`)."""
import copy

from tests.gpu.e2e_script import e2e_log, e2e_lossless_runs, e2e_model_dirs, e2e_server, lossless

REF = [[5, 6, 7, 8], [9, 9, 9, 1]]


def test_prompts_fixed_varied_and_in_range():
    a, b = lossless.prompts(), lossless.prompts()
    assert a == b and len(a) == 32
    lengths = {len(p) for p in a}
    assert min(lengths) == 1 and max(lengths) >= 900 and len(lengths) > 20
    assert all(100 <= t < 31000 for p in a for t in p)


def test_compare_equal_and_first_difference_with_its_margin():
    assert lossless.compare(REF, copy.deepcopy(REF)) == {"equal": True, "lossless": True, "n": 2, "tokens": 8,
                                                         "mismatches": []}
    margins = [[0.3, 0.2, 1e-6, 0.5], [0.1, 0.1, 0.1, 0.1]]
    c = lossless.compare(REF, [[5, 6, 4, 3], [9, 9, 9, 1]], margins)
    assert not c["equal"]
    assert c["mismatches"] == [{"request": 0, "position": 2, "reference": 7, "got": 4, "margin": 1e-6, "lengths": [4, 4],
                               "within_noise": False}]


def test_compare_short_output_and_count_mismatch():
    c = lossless.compare(REF, [[5, 6], [9, 9, 9, 1]])
    assert c["mismatches"][0]["position"] == 2 and c["mismatches"][0]["got"] is None
    assert not lossless.compare(REF, REF[:1])["equal"]


def test_margins_from_meta_info():
    meta = [{"output_top_logprobs": [[(-0.1, 5, None), (-2.1, 8, None)], None, [(-1.0, 3, None), (-1.0, 4, None)]]}]
    m = lossless.margins(meta)
    assert m == [[2.0, None, 0.0]] or (abs(m[0][0] - 2.0) < 1e-12 and m[0][1] is None and m[0][2] == 0.0)
    assert lossless.min_margin(m) == 0.0


def test_acceptance_from_meta_info():
    meta = [{"completion_tokens": 32, "spec_verify_ct": 16, "spec_num_correct_drafts": 16},
            {"completion_tokens": 32, "spec_verify_ct": 32, "spec_num_correct_drafts": 0}]
    a = lossless.acceptance(meta)
    assert a == {"verify_steps": 48, "completion_tokens": 64, "accept_length": 1.3333, "correct_drafts": 16, "requests": 2}
    assert lossless.acceptance([{"completion_tokens": 32}]) is None


def test_run_plan():
    runs = e2e_lossless_runs.lossless_runs()
    ids = [r["id"] for r in runs]
    assert len(ids) == len(set(ids))
    assert ids[0] == "dense.patched.base.eager"
    # every (model, tree) that has runs has its reference, before them
    for r in runs:
        ref = f"{r['model']}.{r['tree']}.base.eager"
        assert ref in ids and ids.index(ref) <= ids.index(r["id"])
    assert not any(r["tree"] == "pristine" and r["spec"] == "DDTREE" for r in runs)
    # DDTREE on both models, CUDA graphs off and on, each expected to start, serve and be compared
    ddtree = {r["id"]: r for r in runs if r["spec"] == "DDTREE"}
    # with the overlap scheduler (SGLang's default), and the graphs runs without it too
    # and with --speculative-ddtree-chain-batch 2 (graphs, overlap): the tree for single requests, the chain for the batch
    assert set(ddtree) == {f"{m}.patched.ddtree.{g}" for m in ("dense", "hybrid") for g in ("eager", "graphs")} | \
        {f"{m}.patched.ddtree.graphs.no-overlap" for m in ("dense", "hybrid")} | \
        {f"{m}.patched.ddtree.graphs.chain2" for m in ("dense", "hybrid")}
    assert all((r["chain"] == 2) == r["id"].endswith(".chain2") and (r["chain"] is None or r["graphs"] and r["overlap"])
               for r in runs)
    assert [r["overlap"] for r in runs if not r["id"].endswith(".no-overlap")] == \
        [True] * (len(runs) - 2), "every other run keeps SGLang's default, the overlap scheduler"
    assert all(r["expect"] == "ok" and r["refusal"] is None for r in ddtree.values()), ddtree
    # the graphs runs come right after the eager ones: they are the point of issue 16
    assert ids.index("hybrid.patched.ddtree.graphs") == ids.index("hybrid.patched.ddtree.eager") + 1


def test_flags():
    models = {"hybrid-draft": "/m/hd", "dense-draft": "/m/dd"}
    run = {"model": "hybrid", "spec": "DDTREE", "graphs": False}
    f = e2e_lossless_runs.lossless_flags(run, models, "float32")
    assert f[:3] == ["--dtype", "float32", "--disable-cuda-graph"]
    assert "--mm-attention-backend" in f and f[f.index("--speculative-draft-model-path") + 1] == "/m/hd"
    assert "--disable-overlap-schedule" not in f, "DDTREE runs with the overlap scheduler"
    o = e2e_lossless_runs.lossless_flags(dict(run, overlap=False), models, "float32")
    assert "--disable-overlap-schedule" in o
    assert "--speculative-ddtree-chain-batch" not in f
    c = e2e_lossless_runs.lossless_flags(dict(run, chain=2), models, "float32")
    assert c[c.index("--speculative-ddtree-chain-batch") + 1] == "2"
    d = e2e_lossless_runs.lossless_flags({"model": "dense", "spec": "DDTREE", "graphs": True}, models, "bfloat16")
    assert d[d.index("--cuda-graph-bs") + 1:d.index("--cuda-graph-bs") + 4] == ["1", "4", "32"]
    assert "--disable-cuda-graph" not in d and "--mm-attention-backend" not in d
    assert d[d.index("--speculative-draft-model-path") + 1] == "/m/dd" and "--disable-overlap-schedule" not in d
    g = e2e_lossless_runs.lossless_flags({"model": "dense", "spec": None, "graphs": True}, models, "float32")
    assert g[g.index("--cuda-graph-bs") + 1:g.index("--cuda-graph-bs") + 4] == ["1", "4", "32"]
    assert "--speculative-algorithm" not in g and "--disable-cuda-graph" not in g


def _run(id_, model, tree, spec, graphs, single, batch=None, healthy=True, refusal=None, **kw):
    r = {"id": id_, "model": model, "tree": tree, "spec": spec, "graphs": graphs, "refusal": refusal, "healthy": healthy,
         "requests_ok": healthy, "log_figures": e2e_log.parse_log(""), "dtype": "float32"}
    if single is not None:
        r.update(single=single, batch=batch if batch is not None else single)
    r.update(kw)
    return r


def test_check_lossless_and_table():
    margins = [[0.5] * 4, [0.5, 0.5, 3e-7, 0.5]]
    bad = [[5, 6, 7, 8], [9, 9, 2, 1]]
    runs = [
        _run("d.patched.base.eager", "dense", "patched", None, False, REF, margins=margins, logprob_batch=REF),
        _run("d.patched.dflash.eager", "dense", "patched", "DFLASH", False, REF, bad,
             acceptance={"single": {"accept_length": 1.5}, "batch": {"accept_length": 1.4}},
             pools_vs_ledger=[{"name": "kv_cache", "ledger_bytes": 1, "allocated_bytes": 1, "diff": 0, "equal": True}]),
        _run("d.pristine.base.eager", "dense", "pristine", None, False, REF),
        # a run planned as a deliberate start-up refusal (none is planned today; DDTREE's refusal of
        # --page-size 16 is one the overlay has)
        _run("h.patched.ddtree.page16", "hybrid", "patched", "DDTREE", True, None, healthy=False,
             refusal="DDTREE: --page-size 16 is not supported", log_figures=e2e_log.parse_log(
                 "ValueError: --speculative-algorithm DDTREE: --page-size 16 is not supported (the tree commit keeps "
                 "the accepted KV slots where they are, which needs page size 1; "
                 "sglang/srt/speculative/ddtree_algo.py). Start with --page-size 1.\n")),
        _run("h.patched.ddtree.page16b", "hybrid", "patched", "DDTREE", True, None, healthy=False,
             refusal="DDTREE: --page-size 16 is not supported", log_figures=e2e_log.parse_log("RuntimeError: CUDA out of memory\n")),
        {"id": "h.pristine.base.eager", "model": "hybrid", "tree": "pristine", "spec": None, "graphs": False,
         "expect": "ok", "skipped": "budget: 10 s left, a run takes ~40 s"},
    ]
    e2e_lossless_runs.check_lossless(runs)
    by = {r["id"]: r["check"] for r in runs}
    assert by["d.patched.base.eager"]["pass"]
    assert by["d.pristine.base.eager"]["pass"] and "pristine reference = patched reference" in by["d.pristine.base.eager"]["why"]
    spec = by["d.patched.dflash.eager"]
    assert not spec["pass"] and spec["compare"]["single"]["equal"]
    assert spec["compare"]["batch"]["mismatches"][0]["margin"] == 3e-7
    assert by["h.patched.ddtree.page16"]["pass"] is True
    assert by["h.patched.ddtree.page16b"]["pass"] is False       # another failure is not the refusal
    assert by["h.pristine.base.eager"]["pass"] is None
    t = e2e_lossless_runs.lossless_table(runs)
    assert "| d.patched.dflash.eager | float32 | ok | = | 1 differ | 1.5 / 1.4 | equal |" in t
    assert "batch request 1 position 2: reference 9, got 2, reference margin 3e-07" in t
    assert "- h.pristine.base.eager: SKIP: budget" in t


def test_run_lossless_budget_fallback_and_partial_saves(tmp_path, monkeypatch):
    """The run loop with the server replaced: a float32 refusal of a reference falls back to
    bfloat16 (said in the run), the budget skips what would not fit, every run is saved."""
    clock = {"t": 0.0}
    monkeypatch.setattr(e2e_model_dirs, "make_lossless_models", lambda work, out, device: (
        {k: tmp_path / k for k in ("dense", "hybrid", "dense-draft", "hybrid-draft")}, {"sha256": {"dense": "ab"}}))
    seen = []

    def fake_server(tree, work, model, flags, prefix, port, timeout, common, exercise_fn, probe, extra_env):
        assert extra_env == ({"SGLO_E2E_NATIVE_OPS": "1", "TRITON_F32_DEFAULT": "ieee", "SGLANG_MAMBA_CONV_DTYPE": "float32"}
                             if flags[1] == "float32" else {})
        seen.append((prefix.name, flags[1]))
        clock["t"] += 100 if len(seen) == 1 else 40
        if prefix.name == "dense.patched.base.eager.float32":
            return {"healthy": False, "exit_code": 1, "log_figures": e2e_log.parse_log("ValueError: float32 is not supported here\n")}
        if prefix.name == "hybrid.patched.base.eager.float32":      # a start that timed out: no dtype fallback
            return {"healthy": False, "log_figures": e2e_log.parse_log("")}
        return {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log(""), "start_s": 1,
                "single": REF, "batch": REF, "margins": [[1.0] * 4] * 2}
    monkeypatch.setattr(e2e_server, "run_server", fake_server)
    saves = []
    res = e2e_lossless_runs.run_lossless("all", tmp_path, tmp_path, 300, 0.0, 200, "float32", 30000, saves.append, lambda: clock["t"])
    runs = {r["id"]: r for r in res["runs"]}
    first = runs["dense.patched.base.eager"]
    assert first["dtype"] == "bfloat16" and "float32 is not supported" in first["float32_failed"]
    assert seen[:3] == [("dense.patched.base.eager.float32", "float32"), ("dense.patched.base.eager.bfloat16", "bfloat16"),
                        ("dense.patched.dflash.eager.bfloat16", "bfloat16")]
    assert seen[3] == ("hybrid.patched.base.eager.float32", "float32") and seen[4][1] == "float32"
    assert "float32_failed" not in runs["hybrid.patched.base.eager"]
    done = [r for r in res["runs"] if not r.get("skipped")]
    assert len(done) == 4 and len(saves) == 4       # 140 + 40 + 40 = 220 s; the next would pass 300 - 15
    assert all("budget" in r["skipped"] for r in res["runs"][4:])
    assert runs["dense.patched.dflash.eager"]["check"]["pass"] and runs["dense.patched.dflash.eager"]["single"]

    # a second call resumes: the completed runs are kept, the rest runs and is compared with the kept references
    seen.clear()
    clock["t"] = 0.0
    res2 = e2e_lossless_runs.run_lossless("all", tmp_path, tmp_path, 300, 0.0, 200, "float32", 30100, saves.append,
                            lambda: clock["t"], resume=res)
    runs2 = {r["id"]: r for r in res2["runs"]}
    assert runs2["dense.patched.dflash.eager"].get("resumed") and runs2["dense.patched.dflash.eager"]["check"]["pass"]
    assert runs2["dense.patched.base.eager"].get("resumed")     # passed (in bfloat16 after the float32 exit)
    assert seen[0][0] == "hybrid.patched.base.eager.float32"             # the first run that did not pass
    # the model's dtype carries over from the kept reference (bfloat16 after its float32 exit)
    dense = [d for name, d in seen if name.startswith("dense.")]
    assert dense and set(dense) == {"bfloat16"}, seen
    # --no-dtype-fallback: the float32 exit is the run's result, nothing is retried in bfloat16
    seen.clear()
    clock["t"] = 0.0
    res3 = e2e_lossless_runs.run_lossless("dense.patched.base.eager", tmp_path, tmp_path, 300, 0.0, 200, "float32", 30200,
                            saves.append, lambda: clock["t"], fallback=False)
    assert seen == [("dense.patched.base.eager.float32", "float32")]
    only = res3["runs"][0]
    assert only["dtype"] == "float32" and "float32_failed" not in only and not only["check"]["pass"]
    other = dict(res, params={"sha256": {"dense": "cd"}})
    import pytest
    with pytest.raises(SystemExit, match="weights differ"):
        e2e_lossless_runs.run_lossless("all", tmp_path, tmp_path, 300, 0.0, 200, "float32", 30100, saves.append,
                         lambda: clock["t"], resume=other)



def test_resume_keeps_each_trees_reference_dtype(tmp_path, monkeypatch):
    """A resumed report holding the patched hybrid's float32 reference and the pristine one's bfloat16
    fallback (pristine v0.5.17 cannot serve the hybrid in float32): a patched run of that model runs in
    float32 beside its own reference, the pristine one in bfloat16 beside its own. (Keyed by model
    alone, the pristine fallback once put the patched DDTREE run in bfloat16 against the float32
    reference: tests/data/gpu_results/2026-12-04/lossless-resume-bf16.)"""
    monkeypatch.setattr(e2e_model_dirs, "make_lossless_models", lambda work, out, device: (
        {k: tmp_path / k for k in ("dense", "hybrid", "dense-draft", "hybrid-draft")}, {"sha256": {"hybrid": "ab"}}))
    seen = []

    def fake_server(tree, work, model, flags, prefix, port, timeout, common, exercise_fn, probe, extra_env):
        seen.append((prefix.name, flags[1]))
        return {"healthy": True, "requests_ok": True, "log_figures": e2e_log.parse_log(""), "start_s": 1,
                "single": REF, "batch": REF, "margins": [[1.0] * 4] * 2}
    monkeypatch.setattr(e2e_server, "run_server", fake_server)
    ref = dict(healthy=True, requests_ok=True, single=REF, batch=REF, margins=[[1.0] * 4] * 2, graphs=False, spec=None)
    resume = {"params": {"sha256": {"hybrid": "ab"}}, "runs": [
        dict(ref, id="hybrid.patched.base.eager", model="hybrid", tree="patched", dtype="float32"),
        dict(ref, id="hybrid.pristine.base.eager", model="hybrid", tree="pristine", dtype="bfloat16",
             float32_failed="AssertionError: ChunkGatedDeltaRuleFunction does not support float32.")]}
    res = e2e_lossless_runs.run_lossless("hybrid.patched.ddtree.graphs,hybrid.pristine.dflash.eager", tmp_path, tmp_path,
                                         600, 0.0, 200, "float32", 30000, lambda part: None, lambda: 0.0, resume=resume)
    assert seen == [("hybrid.patched.ddtree.graphs.float32", "float32"),
                    ("hybrid.pristine.dflash.eager.bfloat16", "bfloat16")], seen
    by = {r["id"]: r for r in res["runs"]}
    assert by["hybrid.patched.ddtree.graphs"]["check"]["pass"], by["hybrid.patched.ddtree.graphs"]["check"]

def test_a_divergence_within_the_references_own_noise_is_marked_and_nothing_else_is():
    ref = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
    margins = [[0.5, 0.0078125, 0.5, 0.5], [0.5, 0.5, 0.03125, 0.5], [0.5, 0.5, 0.5, 0.5]]
    # the server's own batch diverges from its single outputs at a 1-ulp margin only
    own_batch = [[1, 2, 30, 40], [5, 6, 7, 8], [9, 9, 9, 9]]
    noise = lossless.reference_noise(ref, own_batch, margins)
    assert noise == 0.5                                   # request 0 diverges at position 2, margin 0.5
    noise = lossless.reference_noise(ref, [[1, 20, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]], margins)
    assert noise == 0.0078125
    spec = [[1, 21, 3, 4], [5, 6, 70, 8], [9, 9, 9, 9]]
    c = lossless.compare(ref, spec, margins, noise=noise)
    assert not c["equal"] and not c["lossless"]
    assert [(m["request"], m["within_noise"]) for m in c["mismatches"]] == [(0, True), (1, False)]
    c = lossless.compare(ref, [[1, 21, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]], margins, noise=noise)
    assert not c["equal"] and c["lossless"]
    assert lossless.compare(ref, spec, margins)["lossless"] is False        # no noise given: nothing excused
    assert lossless.reference_noise(ref, own_batch, None) is None          # no margins: no noise claimed
    assert lossless.reference_noise(ref, ref, margins) == 0.0


def test_the_pins_lossless_matrix_on_the_h200_judged_again():
    """v0.5.17 on the H200 (2026-12-03, lossless-matrix-2: two calls, the second resuming the first):
    re-judged here from the recorded outputs, not read from the record's own verdicts. Every patched
    run (dense and hybrid; DFLASH and DDTREE; eager and CUDA graphs; DDTREE with the overlap scheduler
    on and off) equals its non-speculative float32 server token for token, singly and batched, with
    the ledger equal to the allocated pools. Pristine v0.5.17 cannot serve the hybrid in float32 at
    all (its Gated DeltaNet chunk kernel refuses float32: what float32-gdn-chunk.patch carries), so
    its reference falls back to bfloat16, is not set against the float32 patched one, and its DFLASH
    diverges beyond that reference's own single-vs-batch noise (bfloat16 verify against decode)."""
    import json
    from pathlib import Path

    d = json.loads((Path(__file__).parents[1] / "data" / "gpu_results" / "2026-12-03" / "lossless-matrix-2"
                    / "e2e.json").read_text())
    runs = copy.deepcopy(d["lossless"]["runs"])
    for r in runs:      # the verdicts are this test's wherever the record kept the outputs
        if r.get("single"):
            r.pop("check", None)
            r.pop("resumed", None)
    # (the speculative runs of that day's report kept only their comparison with the reference:
    # e2e_lossless_runs then dropped a non-reference run's outputs; it keeps them since)
    kept = {r["id"] for r in runs if r.get("check")}
    assert kept == {"dense.patched.ddtree.graphs", "hybrid.patched.ddtree.graphs.no-overlap",
                    "dense.patched.dflash.graphs", "hybrid.patched.dflash.graphs", "hybrid.pristine.dflash.eager"}
    for r in runs:
        if r["id"] in kept:
            r["resumed"] = True
    by = {r["id"]: r for r in e2e_lossless_runs.check_lossless(runs)}
    patched = [i for i in by if ".patched." in i]
    assert sorted(patched) == sorted([
        "dense.patched.base.eager", "hybrid.patched.base.eager", "dense.patched.ddtree.graphs",
        "hybrid.patched.ddtree.graphs.no-overlap", "dense.patched.dflash.graphs", "hybrid.patched.dflash.graphs"])
    for i in patched:
        r = by[i]
        assert r["dtype"] == "float32" and r["check"]["pass"], (i, r["check"]["why"])
        if r["spec"]:
            for kind in ("single", "batch"):
                c = r["check"]["compare"][kind]
                assert c["equal"] and (c["n"], c["tokens"]) == (32, 1024), (i, kind)
            assert r["acceptance"]["single"]["accept_length"] > 1.0     # speculation really ran
    assert "--disable-overlap-schedule" in by["hybrid.patched.ddtree.graphs.no-overlap"]["command"]
    assert "--disable-overlap-schedule" not in by["dense.patched.ddtree.graphs"]["command"]
    base, spec = by["hybrid.pristine.base.eager"], by["hybrid.pristine.dflash.eager"]
    assert "ChunkGatedDeltaRuleFunction does not support float32" in base["float32_failed"]
    assert base["dtype"] == spec["dtype"] == "bfloat16"
    assert base["check"]["pass"] and "pristine_vs_patched" not in base["check"]["compare"]
    assert any("not compared with the patched one (float32)" in w for w in base["check"]["why"])
    beyond = [m for m in spec["check"]["compare"]["single"]["mismatches"] if not m["within_noise"]]
    assert not spec["check"]["pass"] and len(beyond) == 4
    assert all(m["margin"] > base["check"]["reference_noise"] for m in beyond)


def test_ddtree_with_its_draft_head_in_the_graph_on_the_h200_judged_again():
    """2026-12-04 (lossless-graph-head): DDTREE with its top-K and tree build inside the drafter's CUDA
    graph (DDTreeDraftHead), hybrid, CUDA graphs, the overlap scheduler on, float32: re-judged here from
    the recorded outputs against the patched hybrid's float32 reference, token for token, single and
    batched; ledger = allocated for every pool of the speculative server."""
    import json
    from pathlib import Path

    d = json.loads((Path(__file__).parents[1] / "data" / "gpu_results" / "2026-12-04" / "lossless-graph-head"
                    / "e2e.json").read_text())
    runs = copy.deepcopy(d["lossless"]["runs"])
    for r in runs:
        if r.get("single"):
            r.pop("check", None)
            r.pop("resumed", None)
        elif r.get("check"):
            r["resumed"] = True
    by = {r["id"]: r for r in e2e_lossless_runs.check_lossless(runs)}
    r = by["hybrid.patched.ddtree.graphs"]
    assert r.get("single") and not r.get("resumed"), "the verdict must be this test's, from the outputs"
    assert r["dtype"] == "float32" and by["hybrid.patched.base.eager"]["dtype"] == "float32"
    assert r["check"]["pass"], r["check"]["why"]
    for kind in ("single", "batch"):
        c = r["check"]["compare"][kind]
        assert c["equal"] and (c["n"], c["tokens"]) == (32, 1024), kind
    assert r["acceptance"]["single"]["accept_length"] > 1.0
    pools = {p["name"]: p["equal"] for p in r["pools_vs_ledger"]}
    assert pools == {"draft_kv": True, "kv_cache": True, "mamba_states": True, "speculative_intermediate_states": True}


def test_a_selection_brings_its_references():
    """--lossless with speculative ids alone: each (model, tree)'s reference runs first (on the
    H200 on 2026-12-04 a chain run without one served 32 requests to end in "no reference run to
    compare with", lossless-chain-noref); a resumed reference is not run again."""
    pick = [r["id"] for r in e2e_lossless_runs.select_runs(
        "dense.patched.ddtree.graphs.chain2,hybrid.patched.ddtree.graphs.chain2")]
    assert pick == ["dense.patched.base.eager", "hybrid.patched.base.eager",
                    "hybrid.patched.ddtree.graphs.chain2", "dense.patched.ddtree.graphs.chain2"]
    kept = {"hybrid.patched.base.eager": {}}
    pick = [r["id"] for r in e2e_lossless_runs.select_runs("hybrid.patched.ddtree.graphs.chain2", kept)]
    assert pick == ["hybrid.patched.base.eager", "hybrid.patched.ddtree.graphs.chain2"]  # kept, not added
    assert len(e2e_lossless_runs.select_runs("all")) == len(e2e_lossless_runs.lossless_runs())


def test_an_unknown_run_id_is_refused_before_any_device_work(tmp_path, capsys):
    from tests.gpu.e2e_script import e2e
    rc = e2e.main(["--bundle", str(tmp_path / "no-bundle"), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "o"),
                   "--cases", "", "--lossless", "hybrid.patched.ddtree.graph.chain2"])
    err = capsys.readouterr().err
    assert rc == 2 and "hybrid.patched.ddtree.graph.chain2 is not a lossless run" in err, err
    assert "hybrid.patched.ddtree.graphs.chain2" in err       # the ids there are
    assert not (tmp_path / "o").exists() and not (tmp_path / "w").exists()
