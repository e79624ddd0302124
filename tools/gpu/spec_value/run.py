"""`run`, on the GPU machine: a run from its inputs to its report.  The inputs are read and proved
before anything starts (the pair's parts and prompts, for --stage measure the trained drafter
against its record; the 27B shape's random prompts), the plan is written (all of it with
--dry-run, which stops there), then the bundle is installed, the pair's target joined and
converted, the drafter trained (train), the servers started and measured (measure) and the report
and its tables written (OUT/spec_value.json, rewritten as it goes, and OUT/spec_value.md)."""
import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import PACKAGE, child_pythonpath
from .. import e2e_install
from .. import e2e_model_dirs
from .. import spec_bench as bench
from .. import spec_pair as pair
from .. import spec_profile as profile
from ..process_groups import GROUPS
from .measure import measure, one_at_a_time, profile_one
from .plan import (TRAIN_SERVER, Group, Model, Places, Stage, big_server, common_flags, file_name, launch_flags,
                   pair_servers, settings)
from .progress import log
from .reports import REPORT
from .servers import Servers
from .train import train_pair, trained_drafter

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Inputs:
    """What a run measures with, read before anything starts: the prompts of each batch size and
    their sampling; the pair's too: its training prompts, its parts' manifest, the trained drafter's
    record (--stage measure) and the servers its stage starts."""
    prompt_sets: dict
    sampling: dict
    train_prompts: list = field(default_factory=list)
    manifest: Optional[dict] = None
    trained: Optional[dict] = None
    servers: list = field(default_factory=list)

    @property
    def profiled_prompt(self):
        return next(iter(self.prompt_sets.values()))[0]


def pair_inputs(args, s, places, report):
    """The pair's inputs (report's prompts, for --stage measure its training and `trained`);
    PairError when --pair lacks them or the trained drafter is not its record's."""
    dirs = places.parts
    mf, pfile = pair.parts_manifest(dirs), pair.found(dirs, "prompts.json")
    if mf is None or pfile is None:
        raise pair.PairError(f"--pair {args.pair}: no parts.json / prompts.json there "
                             "(python3 -m tools.gpu.spec_value prepare writes them)")
    data = json.loads(pfile.read_text())
    report["prompts"] = {"sha256": pair.sha256_file(pfile), "train": len(data["train"]), "eval": len(data["eval"]),
                         "eval_modules": sorted({q["module"] for q in data["eval"]}), "built_with_python": data["python"]}
    ev = [q["ids"] for q in data["eval"]]
    inputs = Inputs({b: ev for b in s.batches}, {"temperature": 0, "max_new_tokens": s.max_new},
                    [q["ids"] for q in data["train"]][:args.train_prompts], mf,
                    servers=pair_servers(s.configs, s.stage, places.drafter))
    if s.stage is Stage.MEASURE:      # the training's facts, from the record beside the drafter they describe
        inputs.trained = trained = trained_drafter(places, report["prompts"]["sha256"])
        report.update({k: trained[k] for k in ("training_data", "training")},
                      trained={"file": str(places.record), "date": trained.get("date"),
                               "drafter_sha256": trained["training"]["sha256"], "proved": True})
    return inputs


def big_inputs(s):
    """The 27B shape's inputs: random prompts of 64 ids, at least 4 and twice the batch of each size."""
    rng = random.Random(0)
    n = {b: max(4, 2 * b) for b in s.batches}
    return Inputs({b: [[rng.randrange(100, 150000) for _ in range(64)] for _ in range(n[b])] for b in s.batches},
                  {"temperature": 0, "max_new_tokens": s.max_new, "ignore_eos": True})


def plan_of(args, s, places, inputs):
    """The report's plan: the stage, every server with its whole command line after
    --model-path/--port/--host, the requests, the profiles, the bundle's wheels, the training."""
    if s.model is Model.PAIR:
        common = common_flags(args, Model.PAIR)
        servers = {p.config.name: {"group": p.group, "model": str(places.target), "port": p.port,
                                   "flags": launch_flags(p.flags, p.port, common)} for p in inputs.servers}
    else:
        common = common_flags(args, Model.BIG)
        servers = {p.config.name: {"model": "$BIG", "port": p.port, "flags": launch_flags(p.flags, p.port, common)}
                   for p in (big_server(c, i, "$DRAFT") for i, c in enumerate(s.configs))}
    wheels = sorted(Path(args.bundle).glob("*.whl")) if args.bundle else []
    plan = {"stage": s.stage, "one_at_a_time": s.one_at_a_time_default or args.one_at_a_time, "servers": servers,
            "requests": {b: len(inputs.prompt_sets[b]) for b in s.batches} if s.stage.measures else {},
            "profile": [c.name for c in s.profile], "bundle_wheels": len(wheels)}
    if s.model is Model.PAIR and s.stage.trains:
        plan["training"] = {"prompts": len(inputs.train_prompts), "answer_tokens": args.train_answer_tokens,
                            "steps": args.train_steps, "batch": args.train_batch,
                            "draft_layers": args.draft_layers, "record": str(places.record)}
    return plan


def convert_target(places, manifest, report):
    """The pair's target (its parts joined) dequantised by spec_pair.convert_target, in a helper
    interpreter with the bundle's dependencies, unless there already: report's target."""
    tdir = places.target
    if not (tdir / "model.safetensors").exists():
        r = GROUPS.run([sys.executable, "-c", f"import json, sys; from {PACKAGE} import spec_pair; "
                        "print(json.dumps(spec_pair.convert_target(sys.argv[1], sys.argv[2])))",
                        str(places.pair / manifest["file"]), str(tdir)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=child_pythonpath(places.work / "deps")))
        if r.returncode != 0:
            raise SystemExit(f"spec_value: converting the target failed:\n{r.stderr[-3000:]}")
        report["target"] = json.loads(r.stdout.strip().splitlines()[-1])
    report["target"] = dict(report.get("target", {}), sha256=pair.sha256_file(tdir / "model.safetensors"),
                            gguf_sha256=manifest["sha256"], package=pair.PACKAGE)
    log(f"target {report['target']}")


def save(places, report):
    """OUT/spec_value.json: the report as it stands."""
    (places.out / REPORT).write_text(json.dumps(report, indent=1) + "\n")


class Run:
    """One `run` on the GPU machine, its report saved as it goes."""

    def __init__(self, args, s, places, inputs, report, t0):
        self.args, self.s, self.places, self.inputs, self.report, self.t0 = args, s, places, inputs, report, t0
        self.servers = Servers(places.work, places.out)
        self.runs = report["servers"] = {}

    def save(self):
        save(self.places, self.report)

    def save_rows(self, rows):
        self.report.update(rows=rows)
        self.save()

    def budget_left(self):
        return self.args.budget_s - (time.time() - self.t0)

    def profiled(self, c, tokens):
        prof = self.report["profiles"]
        prof[c.name] = profile_one(self.servers.live[c.name]["base"], self.inputs.profiled_prompt,
                                   self.places.work / "traces" / file_name(c.name), tokens)
        log(f"profile {c.name}: {prof[c.name].get('iteration_ms')} ms / iteration")

    def measured_alone(self, c, tokens, reserve_s):
        """One server's rounds (reserve_s of the budget kept), then its profile."""
        s = self.s
        rows = measure(self.servers, [c], s.batches, s.rounds, self.inputs.prompt_sets, self.inputs.sampling,
                       lambda: self.budget_left() - reserve_s)
        if c in s.profile:
            self.profiled(c, tokens)
        return rows

    def pair(self):
        """The pair: its target, its drafter (trained, or proved for --stage measure), its servers
        measured (all at once, or one at a time); None, or the exit code when the run ends early."""
        args, s, places, report, servers = self.args, self.s, self.places, self.report, self.servers
        convert_target(places, self.inputs.manifest, report)
        trained = self.inputs.trained
        if s.stage is Stage.MEASURE and trained["target"]["sha256"] != report["target"]["sha256"]:
            raise pair.PairError(f"--stage measure: {places.target / 'model.safetensors'} has sha256 "
                                 f"{report['target']['sha256']}, the drafter was trained against "
                                 f"{trained['target']['sha256']} ({places.record}); run --stage train again with "
                                 "the same --work")
        if s.stage.trains:
            if not train_pair(args, servers, self.runs, report, places, self.inputs.train_prompts, self.save):
                return 1
            if s.stage is Stage.TRAIN or TRAIN_SERVER not in s.configs:     # the answering server is not measured
                self.runs[TRAIN_SERVER.name] = servers.stop(TRAIN_SERVER.name)
            if s.stage is Stage.TRAIN:
                report["total_s"] = round(time.time() - self.t0, 1)
                self.save()
                log(f"stage train done: {places.record}; measure with --stage measure and the same --work")
                return 0
        cfg = report["training"]["config"]
        refused = [c for c in s.configs if c.algorithm is bench.Algorithm.DDTREE and c.budget < cfg["block_size"] - 1]
        report["expected_refusals"] = {c.name: f"budget {c.budget} < block {cfg['block_size']} - 1 (ddtree_algo.py)"
                                       for c in refused}
        started = [p for p in self.inputs.servers if p.group is Group.MEASURE]
        report["profiles"] = {}
        common = common_flags(args, Model.PAIR)
        if args.one_at_a_time:      # the answering AR server (live when measured) first, then the plan's order
            by = {p.config.name: p for p in started}
            order = [c for c in s.configs if c.name in servers.live] + [p.config for p in started]
            report["rows"] = one_at_a_time(
                servers, order, lambda c: servers.start(c, places.target, by[c.name].flags, by[c.name].port, common),
                args.start_timeout, lambda c: self.measured_alone(c, 160, 30 * (1 + (c in s.profile))),
                self.budget_left, 90, self.runs, self.save_rows)
        else:
            for p in started:
                servers.start(p.config, places.target, p.flags, p.port, common)
            servers.wait([p.config.name for p in started], args.start_timeout)
            report["rows"] = measure(servers, s.configs, s.batches, s.rounds, self.inputs.prompt_sets,
                                     self.inputs.sampling, lambda: self.budget_left() - 30 * (1 + len(s.profile)),
                                     save=self.save_rows)
            self.save()
            for c in s.profile:
                if c.name in servers.live and servers.live[c.name]["run"].get("healthy"):
                    self.profiled(c, 160)
        servers.stop_all(self.runs)
        return None

    def big(self):
        """The 27B shape: config-only models with dummy weights, each configuration's server alone."""
        args, s, servers = self.args, self.s, self.servers
        models = e2e_model_dirs.make_models(self.places.work, ROOT / "tests" / "plan" / "data")
        self.report["profiles"] = {}
        big = {c.name: big_server(c, i, models["draft"]) for i, c in enumerate(s.configs)}
        common = common_flags(args, Model.BIG)
        self.report["rows"] = one_at_a_time(
            servers, s.configs, lambda c: servers.start(c, models["big"], big[c.name].flags, big[c.name].port, common),
            args.start_timeout, lambda c: self.measured_alone(c, s.max_new, 60), self.budget_left, 150, self.runs,
            self.save_rows)

    def finish(self):
        """The medians, ratios (and the 27B shape's projection), the tables; the exit code: 0 when every
        server started (or was refused by design) and no measurement had errors, 1 otherwise."""
        report, s, runs = self.report, self.s, self.runs
        report["summary"] = bench.ratios(bench.medians(report["rows"]))
        if s.model is Model.BIG:
            report["projection"] = bench.projection(report["summary"])
        report["total_s"] = round(time.time() - self.t0, 1)
        self.save()
        md = bench.table(report["summary"], f"{s.model}: AR, DFLASH, DDTREE")
        if report["profiles"]:
            md += "\n" + profile.table(report["profiles"])
        if report.get("projection"):
            md += "\n" + bench.projection_table(report["projection"])
        (self.places.out / "spec_value.md").write_text(md)
        print(md)
        for n in report.get("expected_refusals", {}):       # a refusal by design: started, refused with its reason
            runs[n]["refused_as_expected"] = not runs[n].get("healthy") and any(
                "budget" in e for e in runs[n].get("log_figures", {}).get("errors", []))
        ok = all(r.get("healthy") or r.get("refused_as_expected") for r in runs.values() if "skipped" not in r) \
            and not any(r["errors"] for r in report["rows"])
        return 0 if ok else 1


def run(args):
    """`run`: the exit code (PairError, ValueError: bad input, exit 2 in cli)."""
    t0 = time.time()
    s = settings(args)
    places = Places.of(args)
    places.out.mkdir(parents=True, exist_ok=True)
    report = {"model": s.model, "stage": s.stage, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "python": sys.version.split()[0], "configs": [c.name for c in s.configs], "batches": s.batches,
              "rounds": s.rounds, "max_new_tokens": s.max_new, "dry_run": args.dry_run,
              "sleep_on_idle": args.sleep_on_idle, "one_at_a_time": s.one_at_a_time_default or args.one_at_a_time,
              "step_definition": bench.STEP_DEFINITION}
    inputs = pair_inputs(args, s, places, report) if s.model is Model.PAIR else big_inputs(s)
    report["plan"] = plan_of(args, s, places, inputs)
    joined = s.model is Model.PAIR and (args.dry_run or not (places.target / "model.safetensors").exists())
    if joined:      # the parts proved (and joined) before anything starts
        pair.join_parts(inputs.manifest, places.parts, places.pair / inputs.manifest["file"])
    if args.dry_run:
        if joined:
            report["plan"]["target_parts"] = "proved"
        save(places, report)
        print(json.dumps(report["plan"], indent=1))
        return 0
    # --- the GPU machine
    if joined:
        log("target parts proved")
    if not (places.work / "patched" / "sglang").exists():
        shutil.rmtree(places.work, ignore_errors=True)
        report["install"] = e2e_install.install(args.bundle, places.work)
    report["install_s"] = round(time.time() - t0, 1)
    import torch
    report.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0))
    try:
        report["patched_wheel"] = json.loads((Path(args.bundle) / "bundle.json").read_text()).get("patched_wheel")
    except (OSError, ValueError, TypeError):
        pass
    r = Run(args, s, places, inputs, report, t0)
    if s.model is Model.PAIR:
        early = r.pair()
        if early is not None:
            return early
    else:
        r.big()
    return r.finish()
