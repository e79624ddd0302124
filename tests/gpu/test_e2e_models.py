"""The lossless check's drafter checkpoint (tools/gpu/e2e_models.py): its names are
the ones the pin's DFlashDraftModel.load_weights reads (checked against
the pin's own sglang/srt/models/dflash.py, fixture pristine_tree: its stacked-parameter mapping and the
modules its constructors create), its shapes follow the config, its init is normal."""
import ast

import pytest
import torch

from tests.gpu.e2e_script import models


@pytest.fixture(scope="module")
def dflash_source(pristine_tree):
    return (pristine_tree / "sglang" / "srt" / "models" / "dflash.py").read_text()


def _mapping_and_attrs(src):
    tree = ast.parse(src)
    mapping, attrs = None, {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "stacked_params_mapping" for t in node.targets):
            mapping = ast.literal_eval(node.value)
        if isinstance(node, ast.ClassDef):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign):
                    for t in sub.targets:
                        if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self":
                            attrs.setdefault(node.name, set()).add(t.attr)
    return mapping, attrs


def test_drafter_names_are_what_dflash_load_weights_reads(dflash_source):
    mapping, attrs = _mapping_and_attrs(dflash_source)
    assert mapping and ("qkv_proj", "q_proj", "q") in mapping
    cfg = models.drafter_config(models.HYBRID)
    names = models.drafter_tensors(cfg)
    # each checkpoint name, after the release's own mapping, walks modules the release creates
    owner = {"": "DFlashDraftModel", "self_attn": "DFlashAttention", "mlp": "DFlashMLP", "layers": "DFlashDecoderLayer"}
    mapped_modules = set()
    for name in names:
        for param, weight, _ in mapping:
            if f".{weight}." in name:
                name = name.replace(weight, param)
                break
        parts = name.split(".")
        assert parts[-1] == "weight"
        parent = ""
        for p in parts[:-1]:
            if p.isdigit():
                continue
            cls = owner[parent]
            assert p in attrs[cls], f"{name}: {cls} has no {p}"
            mapped_modules.add((cls, p))
            parent = p
    # and every weight-holding module of the drafter is given a tensor
    for cls, mod in [("DFlashDraftModel", "fc"), ("DFlashDraftModel", "hidden_norm"), ("DFlashDraftModel", "norm"),
                     ("DFlashAttention", "qkv_proj"), ("DFlashAttention", "o_proj"), ("DFlashAttention", "q_norm"),
                     ("DFlashAttention", "k_norm"), ("DFlashMLP", "gate_up_proj"), ("DFlashMLP", "down_proj"),
                     ("DFlashDecoderLayer", "input_layernorm"), ("DFlashDecoderLayer", "post_attention_layernorm")]:
        assert mod in attrs[cls] and (cls, mod) in mapped_modules


def test_drafter_shapes_and_init():
    cfg = models.drafter_config(models.DENSE)
    st = models.drafter_state(cfg, device="cpu")
    h = models.DENSE["hidden_size"]
    assert cfg["hidden_size"] == h and cfg["num_target_layers"] == models.DENSE["num_hidden_layers"]
    # dflash.py: fc = Linear(num_context_features * hidden, hidden), K = len(target_layer_ids)
    assert st["fc.weight"].shape == (h, 2 * h)
    assert st["layers.0.self_attn.q_proj.weight"].shape == (4 * 128, h)
    assert st["layers.0.self_attn.k_proj.weight"].shape == (2 * 128, h)
    assert st["layers.0.mlp.down_proj.weight"].shape == (h, 1536)
    assert torch.equal(st["norm.weight"], torch.ones(h))
    w = st["layers.0.mlp.gate_proj.weight"]
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert not torch.equal(st["layers.0.mlp.gate_proj.weight"], st["layers.0.mlp.up_proj.weight"])
    assert cfg["dflash_config"]["mask_token_id"] < models.VOCAB
    # SGLang captures target layer k's output before layer k + 1 (models/qwen3.py): never the last layer
    assert max(cfg["dflash_config"]["target_layer_ids"]) + 1 < cfg["num_target_layers"]


def test_vision_ids_and_prompts_inside_the_vocabulary():
    for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert models.HYBRID[k] < models.VOCAB
    assert models.PROMPT_ID_MAX <= min(models.HYBRID[k] for k in ("image_token_id", "video_token_id"))
