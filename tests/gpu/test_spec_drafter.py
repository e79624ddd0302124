"""spec_drafter.py train end to end on the CPU: a tiny Llama target (random weights) in place of the
converted SmolLM2, the real SpecForge and gguf wheels installed as on the GPU machine, the target's
greedy answers, the training with planned steps and its acceptance evaluations, the records."""
import gzip
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.by_path import ROOT
from tests.gpu.spec_script import SPECFORGE, accept, pair, specforge_tree, tool

GGUF_WHEEL = "gguf-0.19.0-py3-none-any.whl"


def _wheel(name, spec):
    cache = Path(os.environ["SGL_OVERLAY_CACHE"]) / "wheels"
    if not (cache / name).exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), spec], check=True)
    return cache / name


def test_planned_steps_and_schedule():
    assert pair.planned_steps(100, 0.5, 5, 4, margin=1.0) == 160
    assert pair.planned_steps(10, 1.0, 5, 4) == 1           # never below one step
    assert pair.eval_points(100, 5) == [0, 25, 50, 75, 100] and pair.eval_points(7, 1) == [7]
    assert pair.eval_points(3, 7) == [0, 1, 2, 3] and pair.eval_points(10, 0) == []
    f = [pair.lr_factor(s, 100, 0.04) for s in range(100)]
    assert f[0] == 0.25 and abs(f[3] - 1.0) < 0.01 and f[99] < 0.001 and max(f) <= 1.0
    # a fixed warm-up: its factors do not depend on the total; the cosine runs after it
    assert [pair.lr_factor(s, 200, warmup_steps=60) for s in range(60)] == \
        [pair.lr_factor(s, 5000, warmup_steps=60) for s in range(60)] == [(s + 1) / 60 for s in range(60)]
    assert pair.lr_factor(60, 200, warmup_steps=60) == 1.0 and abs(pair.lr_factor(130, 200, warmup_steps=60) - 0.5) < 1e-12
    assert pair.lr_factor(200, 200, warmup_steps=60) == 0.0


def test_bucketed_batches_hold_every_sequence_once_an_epoch_and_one_length_each():
    seqs = [([1] * (3 + n), [0, 0, 0] + [1] * n) for n in [2, 40, 3, 41, 4, 42, 5, 43] * 4]
    b = list(pair.training_batches(seqs, 4, 8, seed=1, bucket=2, pad_to=16))
    lens = [sorted(sum(m) for m in mask) for _, mask in b]
    # one epoch is 8 batches of 4: each sequence once
    assert sorted(x for l in lens for x in l) == sorted(sum(m) for _, m in seqs)
    assert all(max(l) - min(l) <= 3 for l in lens)          # short with short, long with long
    assert all(len(r) % 16 == 0 for ids, _ in b for r in ids)
    assert b == list(pair.training_batches(seqs, 4, 8, seed=1, bucket=2, pad_to=16))     # fixed by the seed


def test_anchor_count_is_the_fewest_consecutive_supervised_pairs():
    assert pair.anchor_count([[0, 1, 1, 1, 0], [1, 1, 0, 1, 1]]) == 2
    assert pair.anchor_count([[0, 1, 0, 1]]) == 0


def test_train_on_cpu_end_to_end(tmp_path):
    specforge_tree(tmp_path / "sf")     # fetched (and checked) into the cache
    sf_whl = Path(os.environ["SGL_OVERLAY_CACHE"]) / "wheels" / SPECFORGE
    gg_whl = _wheel(GGUF_WHEEL, "gguf==0.19.0")
    b = tmp_path / "b"
    b.mkdir()
    for w in (sf_whl, gg_whl):
        (b / w.name).write_bytes(w.read_bytes())
    (b / "parts.json").write_text(json.dumps({"file": "t.gguf", "sha256": "0" * 64, "size": 0, "parts": []}))
    vocab = 512
    ev = [{"ids": [1] + [5 + i, 7, 9 + i]} for i in range(3)]
    (b / "prompts.json").write_text(json.dumps({"train": [], "eval": ev}))
    with gzip.open(b / "corpus.json.gz", "wb") as f:
        f.write(json.dumps({"python": "3", "train": [{"ids": [1, 3 + i % 50, 4, 6]} for i in range(40)]}).encode())
    work = tmp_path / "w"
    code = r'''
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
torch.manual_seed(0)
LlamaForCausalLM(cfg).save_pretrained(sys.argv[1])
'''
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "w-pair" / "target")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    out = tmp_path / "out"
    cmd = [*tool("spec_drafter"), "train", "--pair", f"{b}", "--work", str(work), "--out", str(out),
           "--cpu", "--budget-s", "200", "--answer-s", "30", "--min-train-s", "20", "--reserve-s", "5",
           "--answer-tokens", "24", "--answer-batch", "16", "--eval-tokens", "20", "--train-steps", "4", "--train-batch", "4",
           "--target-layers", "0,2", "--evals", "3"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    rep = json.loads((out / "drafter.json").read_text())
    td = rep["training_data"]
    assert td["prompts_answered"] == 40 and td["sequences"] == 40 and td["answer_tokens"] > 40
    # three evaluations (before the first step, in the middle, after the last), each a real acceptance
    curve = rep["curve"]
    assert [c["step"] for c in curve] == [0, 2, 4]
    for c in curve:
        assert all(c[k] >= 1.0 for k in ("DFLASH", "DDTREE-15", "DDTREE-63"))
        assert set(c) >= {"DFLASH", "DDTREE-15", "DDTREE-63", "train_s"}
    # the checkpoint: its parts join to the file whose sha256 the records name; the record spec_value proves
    rec = json.loads((tmp_path / "w-pair" / "training.json").read_text())
    sha = rec["training"]["sha256"]
    assert sha == rep["training"]["sha256"] == pair.sha256_file(tmp_path / "w-pair" / "drafter" / "model.safetensors")
    joined = pair.join_parts(rep["parts"], [out / "d1", out / "d2"] if (out / "d2").exists() else [out / "d1"],
                             tmp_path / "joined")
    assert hashlib.sha256(joined.read_bytes()).hexdigest() == sha
    assert rec["prompts_sha256"] == pair.sha256_file(b / "prompts.json")
    assert rep["training"]["loss_decay_gamma"] == 7.0 and rep["training"]["steps"] == 4
    assert rep["training"]["full_anchor_rows"] and "nonfinite_steps" not in rep["training"]
    # the answers came back; a second run given them answers nothing and trains on the same data
    out2 = tmp_path / "out2"
    cmd2 = [x if x != str(out) else str(out2) for x in cmd] + ["--answers", str(out / "answers.json.gz")]
    r = subprocess.run(cmd2, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    rep2 = json.loads((out2 / "drafter.json").read_text())
    assert rep2["training_data"]["sha256"] == td["sha256"] and "[answers]" not in r.stdout
    assert not (out2 / "answers.json.gz").exists()
    # answers to another corpus are refused: exit 2, naming the file
    with gzip.open(out / "answers.json.gz") as f:
        other = dict(json.loads(f.read()), corpus_sha256="f" * 64)
    with gzip.open(tmp_path / "other.json.gz", "wb") as f:
        f.write(json.dumps(other).encode())
    r = subprocess.run([x if x != str(out / "answers.json.gz") else str(tmp_path / "other.json.gz") for x in cmd2],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 2 and "other.json.gz: answers to another corpus" in r.stderr
    # planned: as many steps as fit, planned again at half the warm-up (step 30) from the steps' own time
    out3 = tmp_path / "out3"
    cmd3 = [x if x != str(out2) else str(out3) for x in cmd2]
    i = cmd3.index("--train-steps")
    cmd3 = cmd3[:i] + cmd3[i + 2:]
    cmd3[cmd3.index("--budget-s") + 1] = "120"
    r = subprocess.run(cmd3, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    t3 = json.loads((out3 / "drafter.json").read_text())["training"]
    plan = t3["planned"]
    assert plan["calib_steps"] == 10 and plan["steps"] >= 1
    last = t3["stopped_at"] if t3["stopped_at"] is not None else t3["steps"]
    if last > 30:       # it got past step 30: the plan was revised there (a slow machine may plan fewer steps)
        assert plan["replanned"]["at_step"] == 30 and t3["steps"] == plan["replanned"]["steps"] > 30
    assert t3["evaluations"][-1]["step"] == last


def test_block_predictions_see_nothing_after_their_anchor(tmp_path):
    """The offline acceptance's premise: the drafter's prediction at an anchor, computed with every
    anchor of the answer in one forward, is the one it makes when the sequence ends at that anchor
    (what a server has then): SpecForge's block mask lets no block see a later position."""
    sf = specforge_tree(tmp_path / "sf")
    code = r'''
import json, sys, torch
from tools.gpu import spec_pair as p, spec_drafter as d
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config
from specforge.algorithms.common.dflash_family_model import OnlineDFlashModel
from specforge.modeling.draft.dflash import DFlashDraftModel
cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True)
torch.manual_seed(0)
target = LlamaForCausalLM(cfg).eval()
dc = p.drafter_config(p.target_config(cfg.to_dict()), layers=2, target_layer_ids=(0, 2), block=8)
conf = Qwen3Config(**{k: v for k, v in dc.items() if k not in ("architectures", "torch_dtype")})
conf._attn_implementation = "sdpa"
draft = DFlashDraftModel(conf).eval()
m = OnlineDFlashModel(draft, target.lm_head, target.model.embed_tokens, mask_token_id=16, block_size=8,
                      attention_backend="sdpa", num_anchors=512)
tree = d.load_tree()
g = torch.Generator().manual_seed(1)
seq = torch.randint(20, 500, (30,), generator=g).tolist()
with torch.no_grad():
    ids, lps = d.block_topk(target, m, seq, 10, [0, 2], 8, 5, tree)
    worst, same = 0.0, True
    for i, a in enumerate(range(10, 29)):
        # the sequence ends at the anchor (the token after it, which a server does not have yet, replaced)
        i1, l1 = d.block_topk(target, m, seq[:a + 1] + [7], a, [0, 2], 8, 5, tree)
        same &= bool((i1[0] == ids[i]).all())
        worst = max(worst, float((l1[0] - lps[i]).abs().max()))
print(json.dumps({"anchors": ids.shape[0], "same_ids": same, "worst": worst}))
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{sf}"))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["anchors"] == 19 and out["same_ids"] and out["worst"] < 1e-4
