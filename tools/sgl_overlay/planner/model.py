"""A model directory (or its config.json) as the harness's model and draft inputs.

Nothing here sizes anything: the config's fields are handed to the harness,
which passes them to the release's own config classes (``Qwen3_5TextConfig``)
or to its ``ModelConfig`` view, and the release's real sizing code does the
rest.  What *is* computed here is what the sizing code never sees: the weights'
byte size (weights.py: ``--weights-gib``, the checkpoint's index, or an
estimate from config.json by transformers on the meta device).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..harness.model_shape import ModelKind
from . import weights as weights_mod

GIB = 1 << 30

# How the harness builds each architecture the planner accepts (the harness
# model kinds, harness/model_shape.ModelKind, built by harness/child/drivers/inputs.model).
HYBRID_QWEN3_5 = ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM")
# Full attention on every layer, one KV head group per layer, standard config
# fields (num_hidden_layers, num_key_value_heads, head_dim or hidden/heads).
DENSE = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
         "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MixtralForCausalLM")


@dataclass
class ModelInput:
    path: Path  # the config.json read
    config: dict
    architecture: str
    kind: ModelKind  # how the harness builds it
    weights_bytes: int | None
    weights_source: str
    weights_method: str = ""  # given | index | config (weights.py)
    notes: list[str] = field(default_factory=list)

    def text_config(self) -> dict:
        return self.config.get("text_config") or self.config

    def context_len(self) -> int:
        """The model's own context length: max_position_embeddings of the text config.
        (SGLang's get_context_length also honours rope scaling factors; the configs
        the planner accepts are read without one, and --context-length overrides.)"""
        t = self.text_config()
        return int(t.get("max_position_embeddings") or 2048)

    def harness_model(self, context_len: int) -> dict:
        t = self.text_config()
        dtype = str(t.get("torch_dtype") or self.config.get("torch_dtype") or t.get("dtype")
                    or self.config.get("dtype") or "bfloat16")
        if self.kind is ModelKind.QWEN3_5:
            out = {"kind": self.kind.value, "architectures": [self.architecture], "context_len": context_len,
                   "dtype": dtype, "text_config": dict(t)}
            if isinstance(self.config.get("vision_config"), dict):   # its RoPE cache (else the release's default)
                out["vision_config"] = dict(self.config["vision_config"])
            return out
        heads = int(t["num_attention_heads"])
        out = {
            "kind": self.kind.value,
            "architectures": [self.architecture],
            "num_hidden_layers": int(t["num_hidden_layers"]),
            "num_key_value_heads": int(t.get("num_key_value_heads") or heads),
            "head_dim": int(t.get("head_dim") or int(t["hidden_size"]) // heads),
            "context_len": context_len,
            "dtype": dtype,
            # the RoPE cache the release pre-expands after "Load weight end" (harness/child/rope_reserve.py)
            "max_position_embeddings": int(t.get("max_position_embeddings") or 2048),
        }
        for key in ("partial_rotary_factor", "rope_scaling", "rope_parameters"):
            if t.get(key) is not None:
                out[key] = t[key]
        return out


def _config_path(p: Path) -> Path:
    p = Path(p)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise UsageError(f"no model config at {p}",
                         hint="pass the model directory (holding config.json) or the config.json itself")
    return p


def read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: cannot read the {what} ({e})",
                         hint=f"pass a valid {what} (JSON)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the {what} is not a JSON object", hint=f"pass a valid {what}")
    return data


def release_architectures(root: Path) -> set[str]:
    """Architectures the release registers: every ``EntryClass`` in sglang/srt/models
    (what its ``models/registry.py`` imports from each module)."""
    names: set[str] = set()
    for p in (root / "sglang" / "srt" / "models").glob("*.py"):
        text = p.read_text(errors="replace")
        for m in re.finditer(r"^EntryClass\s*=\s*(\[[^\]]*\]|[A-Za-z_][\w.]*)", text, re.M):
            names.update(re.findall(r"[A-Za-z_]\w*", m.group(1)))
    return names


def load(model: str | Path, root: Path, release: str, weights_gib: float | None = None,
         need_weights: bool = True) -> ModelInput:
    """Read a model for the release under ``root``; UsageError (exit 2) names what is wrong.
    ``need_weights=False`` (free memory given before and after the load): the weights'
    size is that difference, and none is read or estimated here."""
    path = _config_path(Path(model))
    cfg = read_json(path, "model config.json")
    archs = cfg.get("architectures") or []
    if not archs:
        raise UsageError(f"{path}: no 'architectures' list", hint="a Hugging Face config.json names its class there")
    arch = archs[0]
    known = release_architectures(root)
    if arch not in known:
        import difflib

        close = difflib.get_close_matches(arch, sorted(known), n=4, cutoff=0.6)
        raise UsageError(
            f"{path}: architecture {arch!r} is not one SGLang {release} knows "
            f"({len(known)} architectures registered in {root}/sglang/srt/models"
            + (f"; closest: {', '.join(close)}" if close else "") + ")",
            hint="check the model's config.json, or plan against a release that supports it (--release)")
    if arch in HYBRID_QWEN3_5:
        kind = ModelKind.QWEN3_5
    elif arch in DENSE:
        kind = ModelKind.DENSE
    else:
        raise UsageError(
            f"{path}: SGLang {release} knows {arch!r}, but the planner cannot build its sizing inputs yet",
            hint=f"the planner builds: {', '.join(DENSE + HYBRID_QWEN3_5)}")
    mi = ModelInput(path, cfg, arch, kind, None, "")
    index = path.parent / weights_mod.INDEX
    if weights_gib is not None:
        w = weights_mod.given(weights_gib)
    elif not need_weights:
        w = weights_mod.Weights(0, "not needed: the free memory before and after the load gives it", "free-gib")
    elif index.is_file():
        w = weights_mod.from_index(index, read_json)
    else:
        w = weights_mod.from_config(path, cfg)
    mi.weights_bytes, mi.weights_source, mi.weights_method = w.bytes, w.source, w.method
    return mi


def load_draft(model: str | Path) -> dict:
    """The drafter's config as the harness's [draft] table; ``hf_config`` is the whole
    config.json, which the release's own DFlash rules read (block size)."""
    path = _config_path(Path(model))
    cfg = read_json(path, "draft model config.json")
    t = cfg.get("text_config") or cfg
    try:
        kv = t.get("num_key_value_heads") or t["num_attention_heads"]
        head_dim = t.get("head_dim") or int(t["hidden_size"]) // int(t["num_attention_heads"])
        draft = {
            "path": str(path),
            "num_hidden_layers": int(t["num_hidden_layers"]),
            "num_key_value_heads": int(kv),
            "head_dim": int(head_dim),
            "block_size": cfg.get("block_size") or (cfg.get("dflash_config") or {}).get("block_size"),
            "architectures": cfg.get("architectures") or [],
            "hf_config": cfg,
        }
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{path}: the draft config lacks {e}",
                         hint="a drafter config.json needs num_hidden_layers and num_key_value_heads/head_dim "
                         "(or num_attention_heads and hidden_size)") from None
    # its weights, where its checkpoint is there: from v0.5.14 they are in the sizing's reading
    w = weights_mod.checkpoint(path.parent, read_json)
    if w is not None:
        draft.update(weights_gib=w.bytes / (1 << 30), weights_source=w.source)
    return draft
