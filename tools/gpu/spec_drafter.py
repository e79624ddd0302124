"""The pair's DFlash drafter trained longer, on far more of the target's own answers, with its
learning curve: acceptance on held-out prompts against training time (issue 42; docs/gpu.md,
"Speculative value: the drafter").  No SGLang: the target's greedy answers and features by
transformers on the GPU machine, SpecForge's DFlash model and loss (spec_pair.train_drafter), the
acceptance offline (spec_accept) with the server's own tree code (ddtree_tree).

  # CPU machine: the parts, the benchmark's prompts.json and the corpus (spec_value prepare --corpus)
  # GPU machine, the parts a and b carried (b holds prompts.json, corpus.json.gz, the specforge and gguf wheels)
  python3 -m tools.gpu.spec_drafter train --pair DIR/a,DIR/b --work /tmp/sglo-e2e --out OUT --budget-s 480

`train`: proves the target's parts (spec_pair.join_parts), installs the two wheels (--no-deps) under
<work>/deps, dequantises the target (spec_pair.convert_target), has the target answer the
benchmark's 64 evaluation prompts (greedy, --eval-tokens) and then the corpus's training prompts in
its fixed order (greedy, --answer-tokens, batches of --answer-batch, until --answer-s has passed: the
number answered is recorded, so the same command reproduces the data), trains the drafter for the rest
of the budget (the steps planned from timed passes, recorded) with SpecForge's DFlash recipe
(lr 6e-4, warm-up 4 %, cosine, loss_decay_gamma 7, 512 anchors, gradient norm 1), evaluating the
acceptance of DFLASH and DDTREE-15/63 on the 64 held-out prompts at --evals points, and writes:
OUT/drafter.json (the report: versions, target, data with its sha256, training with the planned steps,
the learning curve, the checkpoint's sha256), OUT/answers.json.gz (the target's answers: `--answers`
gives them to a later run, which then answers nothing), OUT/d1 and OUT/d2 (the checkpoint in two parts with
their manifest, each < 16 MiB: spec_pair.join_parts puts it together), and <work>-pair/drafter +
<work>-pair/training.json, the record spec_value run --stage measure proves and measures
(on the same warm machine, or after carrying the parts back).
Exit 0 trained and recorded; 1 a failed step (its error in the report); 2 bad input (a missing or
changed part, no corpus)."""
import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import child_pythonpath
from . import spec_pair as pair
from .pathload import load
from . import spec_accept as accept


ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "overlay" / "python" / "sglang" / "srt" / "speculative" / "ddtree_tree.py"
ANSWERS = "answers.json.gz"     # OUT/: the target's answers of a run, for --answers
BUDGETS = (15, 63)              # the DDTREE budgets whose acceptance is measured
RECIPE = {"lr": 6e-4, "warmup_ratio": 0.04, "loss_decay_gamma": 7.0, "num_anchors": 512, "max_grad_norm": 1.0}
# ours, around it: batches of answers of about one length, padded to a multiple of 64, every row's anchors
# real (no all-masked block: NaN from CUDA's memory-efficient SDPA), a warm-up of 60 steps (SpecForge's 4 % of
# the 1,500 steps a call fits) after which the cosine runs, so the plan can be revised within the warm-up
BATCHING = {"bucket": 32, "pad_to": 64, "full_anchor_rows": True, "warmup_steps": 60}
RETURN_PART_MIB = 15.5          # a device call returns files of at most 16 MiB


# set to the wheels' folder once the command runs again with them on its path (train)
DEPS_ENV = "SGLO_SPEC_DRAFTER_DEPS"

def log(msg, t0=[time.time()]):    # noqa: B006 - the clock of this process
    print(f"[drafter {time.time() - t0[0]:6.1f}s] {msg}", flush=True)


def data_sha256(seqs):
    """The training data's hash: sha256 of its JSON ([[ids, loss mask], ...]), what a rerun compares."""
    return hashlib.sha256(json.dumps(seqs, separators=(",", ":")).encode()).hexdigest()


def answer_text(out_row, eos):
    """A generated row (after the prompt) cut after its first eos (kept: the answer's end)."""
    row = list(out_row)
    return row[:row.index(eos) + 1] if eos in row else row


def load_tree():
    """The server's own ddtree_tree (the overlay's file, loaded by path and registered as
    ``ddtree_tree``: its dataclasses look their module up)."""
    return load(TREE, "ddtree_tree")


def greedy_answers(model, prompts, max_new, batch, eos, deadline=None, log=log):
    """The target's greedy answers (transformers' generate, left-padded batches in the given order)
    until `deadline` (time.time()); the answers of the prompts done, in order."""
    import torch
    dev = next(model.parameters()).device
    out, t0 = [], time.time()
    for i in range(0, len(prompts), batch):
        if deadline is not None and time.time() > deadline:
            break
        chunk = prompts[i:i + batch]
        L = max(len(p) for p in chunk)
        ids = torch.tensor([[eos] * (L - len(p)) + list(p) for p in chunk], device=dev)
        att = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in chunk], device=dev)
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=att, max_new_tokens=max_new, do_sample=False,
                                 eos_token_id=eos, pad_token_id=eos)
        out += [answer_text(r, eos) for r in gen[:, L:].tolist()]
        log(f"[answers] {len(out)} of {len(prompts)}, {sum(map(len, out))} tokens, {time.time() - t0:.1f} s")
    return out


def block_topk(target, model, seq, prompt_len, layer_ids, block, k, tree_mod):
    """The drafter's top-k tokens and log-probabilities [A, block - 1, k] at every anchor of `seq`'s
    answer (positions prompt_len .. len(seq) - 2), in one forward: SpecForge's own block mask (a block
    sees the target's features strictly before its anchor, and its own block), the server's own
    ddtree_tree.topk_logprobs."""
    import torch
    from specforge.modeling.draft.dflash import extract_context_feature
    dev = next(target.parameters()).device
    ids = torch.tensor([list(seq)], device=dev)
    hs = target(ids, output_hidden_states=True).hidden_states
    feats = extract_context_feature(list(hs), layer_ids).float()
    anchors = torch.arange(prompt_len, len(seq) - 1, device=dev).unsqueeze(0)
    keep = torch.ones_like(anchors, dtype=torch.bool)
    model._sample_anchor_positions = lambda *_: (anchors, keep)     # every anchor of the answer, in order
    try:
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            _, _, hidden = model._forward_draft_blocks(input_ids=ids, hidden_states=feats, loss_mask=None)
            logits = model.lm_head(hidden.reshape(anchors.shape[1], block, -1)[:, 1:, :])
    finally:
        del model._sample_anchor_positions
    return tree_mod.topk_logprobs(logits.float(), k, method="torch")


def evaluator(prompts, answers, layer_ids, block, tree_mod, budgets=BUDGETS):
    """evaluate(target, model) for train_drafter: the acceptance of DFLASH and DDTREE-<budget> on
    these held-out prompts and the target's answers to them, offline (spec_accept)."""
    depth, kmax = block - 1, max(budgets)

    def evaluate(target, model):
        dev = next(target.parameters()).device
        walks = {c: [] for c in ["DFLASH"] + [f"DDTREE-{b}" for b in budgets]}
        for p, a in zip(prompts, answers):
            seq, P = list(p) + list(a), len(p)
            if len(a) < 2:
                for c in walks:
                    walks[c].append(accept.walk([], P, len(a)))
                continue
            tids, tlps = block_topk(target, model, seq, P, layer_ids, block, kmax, tree_mod)
            lab = accept.labels(seq, P, depth).to(dev)
            walks["DFLASH"].append(accept.walk(accept.chain_accepts(tids[:, :, 0], lab).tolist(), P, len(a)))
            for b in budgets:
                acc = accept.tree_accepts(tree_mod, tids[:, :, :b].contiguous(), tlps[:, :, :b].contiguous(), lab, b)
                walks[f"DDTREE-{b}"].append(accept.walk(acc.tolist(), P, len(a)))
        return {c: accept.total(c, w).length for c, w in walks.items()}
    return evaluate


def split_for_return(path, out, max_mib=RETURN_PART_MIB):
    """`path` in as many parts as keep each under max_mib, in out/d1, out/d2, ... (with parts.json)."""
    import math
    n = max(1, math.ceil(Path(path).stat().st_size / (max_mib * 2 ** 20)))
    return pair.split_file(path, [Path(out) / f"d{i + 1}" for i in range(n)])


def train(args):
    t0 = time.time()
    out, work = Path(args.out).resolve(), Path(args.work).resolve()
    pdir = work.with_name(work.name + "-pair")
    tdir, ddir = pdir / "target", pdir / "drafter"
    out.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": sys.version.split()[0],
              "command": " ".join(["python3 -m", __spec__.name] + sys.argv[1:]), "budget_s": args.budget_s,
              "recipe": RECIPE, "batching": BATCHING, "seed": args.seed}

    def save():
        (out / "drafter.json").write_text(json.dumps(report, indent=1) + "\n")

    def left():
        return args.budget_s - (time.time() - t0)
    dirs = [Path(x) for x in args.pair.split(",")]
    mf, pfile, cfile = pair.parts_manifest(dirs), pair.found(dirs, "prompts.json"), pair.found(dirs, pair.CORPUS)
    wheels = [w for d in dirs for pat in ("specforge-*.whl", "gguf-*.whl") for w in sorted(d.glob(pat))]
    if mf is None or pfile is None or cfile is None or len(wheels) < 2:
        raise pair.PairError(f"--pair {args.pair}: parts.json, prompts.json, {pair.CORPUS} and the specforge and gguf "
                             "wheels are not all there (python -m tools.gpu.spec_value prepare --corpus --specforge W --wheel GGUF)")
    if not (tdir / "model.safetensors").exists():
        pair.join_parts(mf, dirs, pdir / mf["file"])
        log("target parts proved")
    deps = work / "deps"
    if os.environ.get(DEPS_ENV) != str(deps):
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", "--target",
                        str(deps)] + [str(w) for w in wheels], check=True)
        # the same command again with the wheels on its path (no tool here edits sys.path: tests/bisect),
        # this package importable after them
        env = dict(os.environ, **{DEPS_ENV: str(deps)},
                   PYTHONPATH=child_pythonpath(*filter(None, [os.environ.get("PYTHONPATH")]), first=deps))
        os.execve(sys.executable, [sys.executable, "-m", __spec__.name, *sys.argv[1:]], env)
    import torch
    import transformers
    report["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                          "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                          "wheels": [w.name for w in wheels]}
    if not (tdir / "model.safetensors").exists():
        report["target"] = pair.convert_target(pdir / mf["file"], tdir)
    report["target"] = dict(report.get("target", {}), sha256=pair.sha256_file(tdir / "model.safetensors"),
                            gguf_sha256=mf["sha256"], package=pair.PACKAGE)
    log(f"target {report['target']} ({report['versions']})")
    save()
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    prompts = json.loads(pfile.read_text())
    with gzip.open(cfile) as f:
        corpus = json.loads(f.read())
    ev = [q["ids"] for q in prompts["eval"]][:args.eval_prompts]
    train_prompts = [q["ids"] for q in corpus["train"]][:args.max_train_prompts]
    report["prompts"] = {"sha256": pair.sha256_file(pfile), "eval": len(ev), "corpus_sha256": pair.sha256_file(cfile),
                         "corpus": len(corpus["train"]), "built_with_python": corpus.get("python")}
    from transformers import AutoModelForCausalLM
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    target = AutoModelForCausalLM.from_pretrained(str(tdir), dtype=dt).to(device).eval()
    t1 = time.time()
    eos = pair.EOS_IDS[0]
    if args.answers:        # an earlier run's answers (its OUT/answers.json.gz): proved against this corpus
        given = json.loads(gzip.open(args.answers).read())
        if given.get("corpus_sha256") != report["prompts"]["corpus_sha256"] or \
                given.get("prompts_sha256") != report["prompts"]["sha256"]:
            raise pair.PairError(f"--answers {args.answers}: answers to another corpus or prompt set "
                                 f"(corpus {given.get('corpus_sha256')}, prompts {given.get('prompts_sha256')}); "
                                 "leave --answers out to answer this one")
        ev_answers, answers = given["eval"], given["train"][:len(train_prompts)]
    else:
        ev_answers = greedy_answers(target, ev, args.eval_tokens, args.answer_batch, eos)
        answers = greedy_answers(target, train_prompts, args.answer_tokens, args.answer_batch, eos,
                                 deadline=time.time() + min(args.answer_s, left() - args.min_train_s))
        with gzip.GzipFile(out / ANSWERS, "wb", mtime=0) as f:      # back with the call: a rerun needs no answering
            f.write(json.dumps({"corpus_sha256": report["prompts"]["corpus_sha256"],
                                "prompts_sha256": report["prompts"]["sha256"], "eval_tokens": args.eval_tokens,
                                "answer_tokens": args.answer_tokens, "eval": ev_answers, "train": answers}).encode())
    del target
    torch.cuda.empty_cache() if device == "cuda" else None
    seqs = pair.training_sequences(train_prompts[:len(answers)], answers, args.train_max_len)
    report["training_data"] = {"prompts_answered": len(answers), "of": len(train_prompts), "sequences": len(seqs),
                               "answer_tokens": sum(map(len, answers)), "answer_max_tokens": args.answer_tokens,
                               "sha256": data_sha256(seqs), "eval_answer_tokens": sum(map(len, ev_answers)),
                               "eval_sha256": data_sha256(ev_answers), "s": round(time.time() - t1, 1),
                               "how": (f"--answers {args.answers}" if args.answers else
                                       "transformers generate, greedy, left-padded batches of "
                                       f"{args.answer_batch} in the corpus's order")}
    log(f"training data {report['training_data']}")
    save()
    (pdir / pair.TRAINED).unlink(missing_ok=True)      # a record stands only for the drafter trained with it
    cfg = pair.drafter_config(json.loads((tdir / "config.json").read_text()), layers=args.draft_layers,
                              target_layer_ids=tuple(int(x) for x in args.target_layers.split(",")))
    tree_mod = load_tree()
    evaluate = evaluator(ev, ev_answers, cfg["dflash_config"]["target_layer_ids"], cfg["block_size"], tree_mod)
    try:
        rec = pair.train_drafter(tdir, seqs, cfg, ddir, steps=args.train_steps, batch=args.train_batch,
                                 lr=RECIPE["lr"], num_anchors=RECIPE["num_anchors"], seed=args.seed, device=device,
                                 log=log, loss_decay_gamma=RECIPE["loss_decay_gamma"],
                                 warmup_ratio=RECIPE["warmup_ratio"], max_grad_norm=RECIPE["max_grad_norm"],
                                 budget_s=left() - args.reserve_s, evaluate=evaluate, evals=args.evals, **BATCHING)
    except Exception as e:      # noqa: BLE001 - recorded, then exit 1
        report["training"] = {"error": f"{type(e).__name__}: {e}"[:3000]}
        save()
        raise
    report["training"] = dict(rec, config=cfg, specforge=next(w.name for w in wheels if "specforge" in w.name),
                              command="spec_pair.train_drafter (spec_drafter train)")
    report["curve"] = rec.get("evaluations", [])
    pair.record_training(pdir, report)
    report["parts"] = split_for_return(ddir / "model.safetensors", out)
    report["total_s"] = round(time.time() - t0, 1)
    save()
    log(f"drafter {rec['sha256']}: {rec['steps']} steps in {rec['seconds']} s; curve {report['curve']}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="(GPU) the answers, the drafter, its learning curve")
    t.add_argument("--pair", required=True, help="the folders spec_value prepare --corpus wrote (a,b)")
    t.add_argument("--work", default="/tmp/sglo-e2e")
    t.add_argument("--out", required=True)
    t.add_argument("--budget-s", type=float, default=480, help="the whole command's seconds")
    t.add_argument("--answer-s", type=float, default=150, help="at most this long answering the corpus")
    t.add_argument("--min-train-s", type=float, default=120, help="the answering stops to leave this much training")
    t.add_argument("--reserve-s", type=float, default=25, help="kept after the training (export, parts)")
    t.add_argument("--answer-tokens", type=int, default=192)
    t.add_argument("--answer-batch", type=int, default=512)
    t.add_argument("--eval-tokens", type=int, default=160, help="the benchmark's max_new_tokens")
    t.add_argument("--eval-prompts", type=int, default=64)
    t.add_argument("--max-train-prompts", type=int, default=None)
    t.add_argument("--answers", help=f"an earlier run's OUT/{ANSWERS}: no answering (its corpus and prompts proved)")
    t.add_argument("--train-steps", type=int, default=None, help="default: as many as fit the budget (planned, recorded)")
    t.add_argument("--train-batch", type=int, default=32)
    t.add_argument("--train-max-len", type=int, default=512)
    t.add_argument("--draft-layers", type=int, default=2)
    t.add_argument("--target-layers", default="1,10,18,27", help="the target layers whose features the drafter reads")
    t.add_argument("--evals", type=int, default=7, help="acceptance evaluations, spread over the training")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--cpu", action="store_true", help="no GPU (the tests: a tiny target)")
    args = ap.parse_args(argv)
    try:
        return train(args)
    except pair.PairError as e:
        print(f"spec_drafter: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"spec_drafter: installing the wheels failed ({e}); are they the ones prepare copied?", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
