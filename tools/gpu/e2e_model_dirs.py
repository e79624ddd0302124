"""The models' folders the end-to-end check starts its servers on: for the cases,
config.json only (--load-format dummy: make_models); for the lossless runs, targets and
drafters with real weights written on this machine (e2e_models, make_lossless_models); the
processor a Qwen3.5-shaped model needs even with --skip-tokenizer-init; and the config.json
copies under --out that tools/gpu/e2e_plan.py reads (record_configs)."""
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from . import PACKAGE, child_pythonpath
from .process_groups import GROUPS     # the helper interpreters end with the check


# the cases' dense model (make_models; the lossless runs' models are e2e_models')
DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
         "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
         "vocab_size": 151936, "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
         "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": True, "bos_token_id": 151643,
         "eos_token_id": 151645, "attention_bias": False, "attention_dropout": 0.0}


def make_models(work, plan_data):
    """The cases' models, config.json only (--load-format dummy): a Qwen3-shaped dense one, and the
    27B-shaped hybrid and its DFlash drafter from plan_data (the repository's tests/plan/data)."""
    work = Path(work)
    dense = work / "models" / "qwen3-dense"
    dense.mkdir(parents=True, exist_ok=True)
    (dense / "config.json").write_text(json.dumps(DENSE, indent=1))
    big = work / "models" / "qwen3.6-27b"
    draft = work / "models" / "qwen3.6-27b-dflash"
    for d, src in ((big, "qwen3.6-27b"), (draft, "qwen3.6-27b-dflash")):
        d.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(plan_data) / src / "config.json", d / "config.json")
    # tests/plan/data keeps only the drafter fields the sizing reads; transformers
    # needs a model type and the attention shape to build it (a Qwen3 decoder, as
    # DFlash drafters are; these fields do not enter the KV or state sizing)
    cfg = json.loads((draft / "config.json").read_text())
    for k, v in {"model_type": "qwen3", "num_attention_heads": 40, "intermediate_size": 17408,
                 "rms_norm_eps": 1e-6, "rope_theta": 10000000, "max_position_embeddings": 262144,
                 "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False}.items():
        cfg.setdefault(k, v)
    (draft / "config.json").write_text(json.dumps(cfg, indent=1))
    _processor(big, work)
    return {"dense": dense, "big": big, "draft": draft}


def record_configs(models, out):
    """The models' config.json files under out/models/NAME (what tools/gpu/e2e_plan.py reads)."""
    for p in models.values():
        (out / "models" / p.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p / "config.json", out / "models" / p.name / "config.json")


def _processor(d, work):
    """Qwen3_5ForConditionalGeneration needs a processor even with
    --skip-tokenizer-init: a tiny word-level tokenizer holding the vision
    special tokens, and a Qwen3-VL processor around it."""
    code = r'''
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, AutoProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
d = sys.argv[1]
special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
vocab = {t: i for i, t in enumerate(special + ["a", "b", "c"])}
tk = Tokenizer(models.WordLevel(vocab, unk_token="a"))
tk.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                               additional_special_tokens=special)
fast.save_pretrained(d)
try:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    video = Qwen3VLVideoProcessor()
except Exception:
    video = None
p = Qwen3VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=fast, video_processor=video)
p.save_pretrained(d)
print("processor ok")
'''
    r = GROUPS.run([sys.executable, "-c", code, str(d)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=f"{work / 'deps'}"))
    if r.returncode != 0:
        print("processor:", r.stderr[-3000:], file=sys.stderr)
    return r.returncode == 0


def make_lossless_models(work, out, device="cuda"):
    """Targets and drafters with real weights, written on this machine (e2e_models),
    with the bundle's transformers; their config.json files are copied to out/models."""
    d = work / "models"
    names = ("dense", "hybrid", "dense-draft", "hybrid-draft")
    models = {k: d / k for k in names}
    if all((p / "model.safetensors").exists() and (p / "config.json").exists() for p in models.values()):
        record_configs(models, out)       # a previous call on this machine wrote them (same seeds)
        return models, {"reused": True, "sha256": _digests(models)}
    code = (f"import json, sys\nfrom {PACKAGE} import e2e_models as m\n"
            "d = sys.argv[1]\n"
            "dev = sys.argv[2]\n"
            "n = {'dense': m.write_target(d + '/dense', m.DENSE, dev), 'hybrid': m.write_target(d + '/hybrid', m.HYBRID, dev)}\n"
            "m.write_drafter(d + '/dense-draft', m.drafter_config(m.DENSE), dev)\n"
            "m.write_drafter(d + '/hybrid-draft', m.drafter_config(m.HYBRID), dev)\n"
            "print(json.dumps(n))\n")
    extra = os.environ.get("PYTHONPATH")
    r = GROUPS.run([sys.executable, "-c", code, str(d), device], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=child_pythonpath(work / "deps", *filter(None, [extra]))))
    if r.returncode != 0:
        raise SystemExit(f"e2e: writing the lossless models failed:\n{r.stderr[-3000:]}")
    _processor(models["hybrid"], work)
    record_configs(models, out)
    return models, {"parameters": json.loads(r.stdout.strip().splitlines()[-1]), "sha256": _digests(models)}


def _digests(models):
    """sha256 of each checkpoint: the same weights across calls and machines, or not."""
    return {k: hashlib.sha256((p / "model.safetensors").read_bytes()).hexdigest()[:16] for k, p in models.items()}

