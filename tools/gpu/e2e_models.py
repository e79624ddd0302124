"""Small models with real (non-degenerate) weights for the end-to-end
check's lossless comparisons, written on the GPU machine itself (nothing
large is carried): a Qwen3-shaped dense model, a Qwen3.5-shaped hybrid
(Gated DeltaNet + attention; `Qwen3_5ForConditionalGeneration`, the class
SGLang 0.5.12.post1 registers for Qwen3.5, with a one-block vision tower), and
a DFlash drafter for each.

Targets: transformers' own classes built from the config (`_from_config`, so
every parameter is initialised as transformers initialises a model: normal
with std = `initializer_range`, norms at one, the DeltaNet's A_log/dt_bias as
its `_init_weights` sets them) and saved with `save_pretrained` (safetensors).

Drafters: transformers has no DFlash class; the checkpoint is written with
torch under the names SGLang's `DFlashDraftModel.load_weights` reads
(sglang/srt/models/dflash.py at v0.5.12.post1: the Qwen3 decoder layer's
`q/k/v/o_proj`, `q/k_norm`, `gate/up/down_proj`, the two layer norms, and the
drafter's own `fc` and `hidden_norm`, `norm`; no embedding or LM head: DFlash
uses the target's).  Linear weights normal(0, initializer_range), norms one.

`drafter_tensors` (names and shapes from a config) is pure and tested on CPU
(tests/gpu/test_e2e_models.py)."""
import json
from enum import StrEnum
from pathlib import Path

VOCAB = 32768          # small vocabulary: prompts are random ids below PROMPT_ID_MAX
PROMPT_ID_MAX = 31000
INIT_STD = 0.02

DENSE = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 512,
         "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
         "head_dim": 64, "vocab_size": VOCAB, "max_position_embeddings": 8192, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": False, "initializer_range": INIT_STD,
         "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "attention_dropout": 0.0}

# the shape of tests/plan/data/qwen3.6-27b (the published Qwen3.6-27B config), scaled down:
# 3 Gated DeltaNet layers + 1 attention layer, hidden 512; vision ids moved below the vocabulary;
# plain RoPE (no mrope_section: the prompts are text-only token ids)
HYBRID = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "tie_word_embeddings": False, "image_token_id": 32000, "video_token_id": 32001,
          "vision_start_token_id": 32002, "vision_end_token_id": 32003,
          "text_config": {"model_type": "qwen3_5_text", "num_hidden_layers": 4, "full_attention_interval": 4,
                          "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128, "hidden_size": 512,
                          "intermediate_size": 1536, "vocab_size": VOCAB, "max_position_embeddings": 8192,
                          "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 128,
                          "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32",
                          "rope_parameters": {"rope_theta": 10000000, "rope_type": "default"},
                          "initializer_range": INIT_STD, "rms_norm_eps": 1e-6, "eos_token_id": 2},
          # deepstack_visual_indexes: SGLang's Qwen3_5VisionConfig defaults it to [8, 16, 24], layers a
          # one-block tower does not have; transformers' Qwen3.5 vision has no deepstack
          "vision_config": {"depth": 1, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
                            "out_hidden_size": 512, "initializer_range": INIT_STD, "deepstack_visual_indexes": []}}


def drafter_config(target):
    """A one-layer DFlash drafter for `target` (DENSE or HYBRID): the target's
    hidden size (DFlash feeds the target's embeddings and LM head), features
    from two target layers, block 16, a mask token inside the vocabulary.
    Not the last layer: SGLang captures the output of layer k "before layer
    k + 1" (models/qwen3.py set_dflash_layers_to_capture), which the last
    layer does not have; the published 27B drafter reads 1..61 of 64 likewise."""
    t = target.get("text_config", target)
    n = t["num_hidden_layers"]
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": t["hidden_size"],
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
            "intermediate_size": 1536, "vocab_size": VOCAB, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "max_position_embeddings": 8192, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "initializer_range": INIT_STD, "block_size": 16,
            "num_target_layers": n, "dflash_config": {"target_layer_ids": [0, n - 2], "mask_token_id": 32010}}


class TensorKind(StrEnum):
    """How a drafter weight is initialised: a linear layer's (normal), a norm's (ones)."""
    LINEAR = "linear"
    NORM = "norm"


def drafter_tensors(cfg):
    """{checkpoint name: (shape, TensorKind)} of a DFlash drafter."""
    h, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", h // nh)
    inter = cfg["intermediate_size"]
    k = len(cfg["dflash_config"]["target_layer_ids"])
    out = {"fc.weight": ((h, k * h), TensorKind.LINEAR), "hidden_norm.weight": ((h,), TensorKind.NORM), "norm.weight": ((h,), TensorKind.NORM)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        out.update({
            p + "input_layernorm.weight": ((h,), TensorKind.NORM),
            p + "post_attention_layernorm.weight": ((h,), TensorKind.NORM),
            p + "self_attn.q_proj.weight": ((nh * hd, h), TensorKind.LINEAR),
            p + "self_attn.k_proj.weight": ((nkv * hd, h), TensorKind.LINEAR),
            p + "self_attn.v_proj.weight": ((nkv * hd, h), TensorKind.LINEAR),
            p + "self_attn.o_proj.weight": ((h, nh * hd), TensorKind.LINEAR),
            p + "self_attn.q_norm.weight": ((hd,), TensorKind.NORM),
            p + "self_attn.k_norm.weight": ((hd,), TensorKind.NORM),
            p + "mlp.gate_proj.weight": ((inter, h), TensorKind.LINEAR),
            p + "mlp.up_proj.weight": ((inter, h), TensorKind.LINEAR),
            p + "mlp.down_proj.weight": ((h, inter), TensorKind.LINEAR),
        })
    return out


def drafter_state(cfg, device="cuda", seed=1):
    """{name: float32 tensor}: linear weights normal(0, initializer_range), norms one."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, (shape, kind) in drafter_tensors(cfg).items():
        t = torch.empty(shape, dtype=torch.float32, device=device)
        out[name] = t.fill_(1.0) if kind is TensorKind.NORM else t.normal_(0.0, cfg["initializer_range"], generator=g)
    return out


def write_drafter(d, cfg, device="cuda", seed=1):
    from safetensors.torch import save_file
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    save_file({k: v.cpu().contiguous() for k, v in drafter_state(cfg, device, seed).items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps(dict(cfg, torch_dtype="float32"), indent=1))


def write_target(d, cfg, device="cuda", seed=0):
    """transformers' class for the config, initialised by transformers, saved as safetensors."""
    import torch
    import transformers
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    cls = getattr(transformers, cfg["architectures"][0])
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(conf, dtype=torch.float32)
    model.save_pretrained(str(d))
    # the shape SGLang reads: the config transformers wrote, with the architecture
    saved = json.loads((d / "config.json").read_text())
    saved["architectures"] = cfg["architectures"]
    (d / "config.json").write_text(json.dumps(saved, indent=1))
    return sum(p.numel() for p in model.parameters())
