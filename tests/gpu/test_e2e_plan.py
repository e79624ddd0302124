"""The planner against reality (tools/gpu/e2e_plan.py), on CPU: the dflash-smoke
start-ups recorded on the H200 on 2026-12-01 (tests/data/gpu_results/2026-12-01/e2e.json:
the command; tests/gpu/data/h200-2026-12-01: the patched tree's ledger and the logs)
go through sgl_overlay.planner with the same model, drafter, flags, GPU and exact free
bytes; its verdict and figures must be the GPU's."""
import json
import os
import shutil
from pathlib import Path

from tools.gpu import e2e_plan as plan_mod
from tests.gpu.e2e_script import ROOT, e2e_log, e2e_lossless_runs, models


DATA = Path(__file__).parent / "data" / "h200-2026-12-01"
GPU_RESULTS = Path(__file__).resolve().parents[1] / "data" / "gpu_results"
CMD = ("-m sglang.launch_server --model-path $WORK/models/qwen3.6-27b --port 30128 --host 127.0.0.1 --load-format dummy "
       "--skip-tokenizer-init --attention-backend triton --disable-cuda-graph --disable-piecewise-cuda-graph --log-level info "
       "--random-seed 0 --mm-attention-backend triton_attn --context-length 32768 --tp 1 --page-size 1 "
       "--speculative-algorithm DFLASH --speculative-dflash-block-size 16 --disable-radix-cache --mamba-scheduler-strategy "
       "no_buffer --max-running-requests 4 --max-mamba-cache-size 24 --mem-fraction-static 0.6856901 "
       "--speculative-draft-model-path $WORK/models/qwen3.6-27b-dflash")
# The release the 2026-12-01 start-ups ran on (pristine) and the one whose stack the patched ones ran
# (tests/conftest.py's patched_tree_of); e2e.json of that day names no patched wheel, so it is given there.
RECORDS_RELEASE = "0.5.12.post1"
PRE, POST = 100540809216, 45412974592       # the patched tree's ledger on the H200


def _run(tree):
    r = {"command": CMD, "healthy": True, "log_figures": e2e_log.parse_log((DATA / f"dflash-smoke.{tree}.log").read_text())}
    if tree == "patched":
        raw = json.loads((DATA / "dflash-smoke.patched.ledger.json").read_text())
        r["ledger_raw"] = {k: raw[k] for k in ("figures", "reservations")}
        r["ledger"] = e2e_log.parse_ledger(json.dumps(raw))
    else:   # the probe's readings, as sglo_probe_logic records them (same machine, same free memory)
        r["probe"] = {"pools": [], "free_readings": [
            {"bytes": PRE, "caller": "init_torch_distributed", "draft": False},
            {"bytes": PRE, "caller": "init_torch_distributed", "draft": False},
            {"bytes": POST, "caller": "_profile_available_bytes", "draft": False},
            {"bytes": POST - 10**9, "caller": "_profile_available_bytes", "draft": True}]}
    return r


def test_inputs_and_free_bytes(tmp_path):
    inp = plan_mod.inputs(_run("patched"), tmp_path)
    assert inp["model"] == tmp_path / "models" / "qwen3.6-27b" and inp["draft"] == tmp_path / "models" / "qwen3.6-27b-dflash"
    assert "--model-path" not in inp["argv"] and "--port" not in inp["argv"] and "--speculative-draft-model-path" not in inp["argv"]
    assert inp["argv"][inp["argv"].index("--mem-fraction-static") + 1] == "0.6856901"
    assert plan_mod.free_bytes(_run("patched")) == (PRE, POST, "ledger")
    assert plan_mod.free_bytes(_run("pristine")) == (PRE, POST, "probe")
    assert plan_mod.free_bytes({"probe": {"free_readings": []}}) is None
    # the pin's sizing uses the second reading of init_torch_distributed (pre_model_load_memory),
    # not the first (before the distributed init): h200-16's 149,007,630,336 / 148,909,064,192 B
    readings = [{"bytes": b, "caller": c, "draft": False} for b, c in (
        (149007630336, "init_torch_distributed"), (148909064192, "init_torch_distributed"),
        (148909064192, "init_torch_distributed"), (93781229568, "_profile_available_bytes"))]
    assert plan_mod.free_bytes({"probe": {"free_readings": readings}}) == (148909064192, 93781229568, "probe")
    # no --mem-fraction-static given: the planner derives SGLang's own (not the logged value, which
    # compare() sets beside it)
    run = dict(_run("pristine"), command=CMD.replace(" --mem-fraction-static 0.6856901", ""))
    run["log_figures"] = dict(run["log_figures"], server_args={"mem_fraction_static": 0.8123})
    assert "--mem-fraction-static" not in plan_mod.inputs(run, tmp_path)["argv"]
    assert plan_mod.real(run)["mem_fraction_static"] == 0.8123


def test_the_fraction_sglang_chose_is_compared_with_the_planners():
    rows = plan_mod.compare({"starts": True, "mem_fraction_static": 0.83},
                            {"starts": True, "mem_fraction_static": 0.8300000000000001})
    assert rows[-1] == {"field": "mem_fraction_static", "gpu": 0.8300000000000001, "planner": 0.83, "equal": True}
    rows = plan_mod.compare({"starts": True, "mem_fraction_static": 0.83}, {"starts": True, "mem_fraction_static": 0.7777})
    assert rows[-1]["equal"] is False
    assert plan_mod.card({"gpu": "NVIDIA H100 80GB HBM3"}) == "H100 80GB"
    assert plan_mod.card({"gpu": "NVIDIA H200"}) == "H200" and plan_mod.card({}) is None


def test_compare_skips_what_a_dead_start_did_not_say():
    rows = plan_mod.compare({"starts": True, "kv_tokens": 5}, {"starts": False, "kv_tokens": None, "case": None})
    assert rows == [{"field": "starts", "gpu": False, "planner": True, "equal": False}]


def test_planner_equals_the_h200_start_ups(tmp_path, patched_tree_of):
    patched_tree = patched_tree_of(RECORDS_RELEASE)     # the stack these start-ups ran (2026-12-01)
    for name in ("qwen3.6-27b", "qwen3.6-27b-dflash"):
        (tmp_path / "models" / name).mkdir(parents=True)
        shutil.copy(ROOT / "tests/plan/data" / name / "config.json", tmp_path / "models" / name / "config.json")
    report = {"gpu": "NVIDIA H200", "cases": [{"name": "dflash-smoke", "runs": {t: _run(t) for t in ("pristine", "patched")}}]}
    (tmp_path / "e2e.json").write_text(json.dumps(report))
    rc = plan_mod.main([str(tmp_path), "--patched-tree", str(patched_tree), "--release", RECORDS_RELEASE,
                       "--out", str(tmp_path)])
    res = {x["id"]: x for x in json.loads((tmp_path / "plan_vs_gpu.json").read_text())}
    for rid in ("dflash-smoke.pristine", "dflash-smoke.patched"):
        got = {r["field"]: (r["gpu"], r["planner"]) for r in res[rid]["rows"]}
        assert got["kv_tokens"] == (3079, 3079) and got["running_requests"] == (4, 4) and got["mamba_slots"] == (24, 24), res[rid]
        assert got["starts"] == (True, True)
    assert res["dflash-smoke.patched"]["verdict"].startswith("starts, over budget by 2.44 GiB")
    assert {r["field"]: r["planner"] for r in res["dflash-smoke.patched"]["rows"]}["case"] == "over_budget"
    assert rc == 0
    md = (tmp_path / "plan_vs_gpu.md").read_text()
    assert "| dflash-smoke.patched | 100,540,809,216 / 45,412,974,592 (ledger) | starts, over budget by 2.44 GiB taken from the headroom (remedy: --mem-fraction-static = 0.797) | True | 3079 | 4 | 24 | over_budget | 0.6856901 |" in md


def test_planner_equals_the_h200_lossless_hybrid_start_ups(tmp_path, patched_tree_of):
    """Call A2 of 2026-12-01 (tests/data/gpu_results/2026-12-01/e2e-lossless-a2.json): the small
    Qwen3.5-shaped hybrid, saved in float32, served with --dtype bfloat16: the KV cells are
    bfloat16 (the flag overrides the checkpoint's dtype), so the planner must give the GPU's
    36,147,328 tokens (18,073,664 when it read the dtype from config.json), and 17,872,448
    with a drafter."""
    report = json.loads((GPU_RESULTS / "2026-12-01/e2e-lossless-a2.json").read_text())
    assert plan_mod.ran_release(report) == RECORDS_RELEASE           # its own patched wheel says so
    patched_tree = patched_tree_of(RECORDS_RELEASE)     # the stack these start-ups ran (2026-12-01)
    e2e_models = models
    report["lossless"]["runs"] = [r for r in report["lossless"]["runs"] if not r.get("skipped")]
    # config.json as the GPU machine wrote it: transformers' save_pretrained of a float32 model
    # (the files themselves did not come back; the fields the sizing reads are these)
    for name, cfg in (("hybrid", e2e_models.HYBRID), ("hybrid-draft", e2e_models.drafter_config(e2e_models.HYBRID))):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text(json.dumps(dict(cfg, torch_dtype="float32")))
    (tmp_path / "e2e.json").write_text(json.dumps(report))
    rc = plan_mod.main([str(tmp_path), "--patched-tree", str(patched_tree), "--out", str(tmp_path)])
    res = {x["id"]: x for x in json.loads((tmp_path / "plan_vs_gpu.json").read_text())}
    kv = {rid: {r["field"]: r["planner"] for r in x["rows"]}["kv_tokens"] for rid, x in res.items()}
    assert kv == {"hybrid.patched.base.eager": 36147328, "hybrid.patched.dflash.eager": 17872448,
                  "hybrid.patched.ddtree.eager": 17872448, "hybrid.patched.dflash.graphs": 17872448}, res
    assert rc == 0, res


def test_float32_runs_are_planned_with_their_conv_state_dtype(tmp_path, patched_tree, monkeypatch):
    """A float32 lossless run records e2e_lossless_runs.lossless_env("float32"); its SGLANG_MAMBA_CONV_DTYPE
    (float32 Mamba conv states, twice the bytes of the default bfloat16) must reach the
    planner's sizing: the same start-up planned without it gets more KV tokens."""
    monkeypatch.delenv("SGLANG_MAMBA_CONV_DTYPE", raising=False)
    run = {"env": e2e_lossless_runs.lossless_env("float32")}
    assert plan_mod.sizing_env(run) == {"SGLANG_MAMBA_CONV_DTYPE": "float32"}
    assert plan_mod.sizing_env({}) == {}
    report = json.loads((GPU_RESULTS / "2026-12-01/e2e-lossless-a2.json").read_text())
    (base,) = [r for r in report["lossless"]["runs"] if r["id"] == "hybrid.patched.base.eager"]
    base = dict(base, command=base["command"].replace("--dtype bfloat16", "--dtype float32"))
    assert "--dtype float32" in base["command"]
    (tmp_path / "models" / "hybrid").mkdir(parents=True)
    (tmp_path / "models" / "hybrid" / "config.json").write_text(
        json.dumps(dict(models.HYBRID, torch_dtype="float32")))
    kv = {}
    for label, env in (("bf16 conv", {}), ("f32 conv", run["env"])):
        report["lossless"]["runs"] = [dict(base, env=env) if env else base]
        (tmp_path / "e2e.json").write_text(json.dumps(report))
        plan_mod.main([str(tmp_path), "--patched-tree", str(patched_tree), "--out", str(tmp_path)])
        (x,) = json.loads((tmp_path / "plan_vs_gpu.json").read_text())
        assert x.get("env", {}) == plan_mod.sizing_env({"env": env})
        kv[label] = {r["field"]: r["planner"] for r in x["rows"]}["kv_tokens"]
    assert kv["f32 conv"] < kv["bf16 conv"], kv
    assert "SGLANG_MAMBA_CONV_DTYPE" not in os.environ     # restored after each plan


def test_planner_equals_the_pins_h200_start_ups(tmp_path, patched_tree):
    """The pin (v0.5.17) on the H200, 2026-12-03: its pristine start-ups (cases/) and the patched
    tree's (cases-conv-windows/, the stack as it is) through the planner with each run's exact free
    bytes: every verdict, KV token count, request count, slot count and ledger case is the GPU's;
    the release comes from the record's own patched wheel."""
    day = GPU_RESULTS / "2026-12-03"
    pristine, patched = (json.loads((day / part / "e2e.json").read_text()) for part in ("cases", "cases-conv-windows"))
    cases = []
    for c in patched["cases"]:
        (p,) = [x for x in pristine["cases"] if x["name"] == c["name"]]
        cases.append({"name": c["name"], "runs": {"pristine": p["runs"]["pristine"], **c["runs"]}})
    assert plan_mod.ran_release(patched) == "0.5.17"
    (tmp_path / "e2e.json").write_text(json.dumps(dict(patched, cases=cases)))
    for name in ("qwen3.6-27b", "qwen3.6-27b-dflash"):
        (tmp_path / "models" / name).mkdir(parents=True)
        shutil.copy(ROOT / "tests/plan/data" / name / "config.json", tmp_path / "models" / name / "config.json")
    rc = plan_mod.main([str(tmp_path), "--patched-tree", str(patched_tree), "--out", str(tmp_path)])
    res = {x["id"]: x for x in json.loads((tmp_path / "plan_vs_gpu.json").read_text())}
    assert len(res) == 6 and rc == 0, res
    assert all(x["equal"] for x in res.values()), res
    got = {r["field"]: r["planner"] for r in res["dflash-smoke-raised.patched+remedy"]["rows"]}
    assert (got["kv_tokens"], got["running_requests"], got["mamba_slots"], got["case"]) == (48567, 2, 24, "over_budget")
    assert not res["zero-requests-dflash.pristine"]["rows"][0]["planner"]      # starts: False, as on the GPU


def test_a_record_without_a_patched_wheel_needs_release(tmp_path, capsys):
    (tmp_path / "e2e.json").write_text(json.dumps({"cases": []}))
    assert plan_mod.main([str(tmp_path)]) == 2
    assert "give it with --release VERSION" in capsys.readouterr().err


def test_planner_equals_the_pins_lossless_start_ups(tmp_path, patched_tree):
    """The pin's lossless matrix on the H200 (2026-12-03, lossless-matrix-2): the small dense and
    hybrid models in float32 (the hybrid's conv states float32 too: lossless_env), with and without
    a DFlash or DDTREE drafter, on the patched tree (its ledger's exact free bytes) and on pristine
    v0.5.17 (the hybrid in bfloat16, after float32 was refused): every start-up's KV tokens, running
    requests and Mamba slots are the GPU's, through the planner with the same flags."""
    e2e_models = models
    report = json.loads((GPU_RESULTS / "2026-12-03/lossless-matrix-2/e2e.json").read_text())
    assert plan_mod.ran_release(report) == "0.5.17"
    # config.json as the GPU machine wrote them: save_pretrained of float32 models (the files did not
    # come back; the fields the sizing reads are these)
    for name, cfg in (("dense", e2e_models.DENSE), ("hybrid", e2e_models.HYBRID),
                      ("dense-draft", e2e_models.drafter_config(e2e_models.DENSE)),
                      ("hybrid-draft", e2e_models.drafter_config(e2e_models.HYBRID))):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / "config.json").write_text(json.dumps(dict(cfg, torch_dtype="float32")))
    (tmp_path / "e2e.json").write_text(json.dumps(report))
    rc = plan_mod.main([str(tmp_path), "--patched-tree", str(patched_tree), "--out", str(tmp_path)])
    res = {x["id"]: x for x in json.loads((tmp_path / "plan_vs_gpu.json").read_text())}
    assert sorted(res) == sorted(r["id"] for r in report["lossless"]["runs"])
    assert all(x["equal"] for x in res.values()), {k: x["rows"] for k, x in res.items() if not x["equal"]}
    assert rc == 0
    gpu = {rid: {r["field"]: r["gpu"] for r in x["rows"]} for rid, x in res.items()}
    # what the comparison covered, each start-up's own figures (read from its log by e2e_log): DDTREE's
    # tree verify keeps the dense conv windows a linear DFLASH chain shares, so on the same hybrid and
    # the same free bytes it starts with fewer KV tokens, and the planner says so too
    assert gpu["hybrid.patched.ddtree.graphs.no-overlap"]["mamba_slots"] == 32
    assert gpu["hybrid.patched.ddtree.graphs.no-overlap"]["kv_tokens"] < gpu["hybrid.patched.dflash.graphs"]["kv_tokens"]
