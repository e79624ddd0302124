"""The model a scenario's ``[model]`` table describes (``ModelShape``): its kind (``ModelKind``) and
where its text model's shape is (``text_config``).  Pure; read by the scenario's checks, the child's
model config (child/drivers/inputs.py), the RoPE pre-expansion (child/rope_reserve.py) and the planner."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from .scenario_tables import Key, Table, Want, one_of


class ModelKind(StrEnum):
    """The model families the harness builds a model config for (``[model] kind``)."""

    DENSE = "dense"  # one attention stack: [model] num_hidden_layers, num_key_value_heads, head_dim
    QWEN3_5 = "qwen3_5"  # Qwen3.5/3.6 (hybrid linear attention): upstream's Qwen3_5TextConfig of [model.text_config]

    @classmethod
    def of(cls, model: Mapping) -> ModelKind:
        """The table's kind (``dense`` where it names none); ValueError for a kind the harness does not build."""
        return cls(model.get("kind") or cls.DENSE)

    @property
    def text_table(self) -> str:
        """The scenario table that holds the text model's shape."""
        return "[model.text_config]" if self is ModelKind.QWEN3_5 else "[model]"


def text_config(model: Mapping) -> Mapping:
    """The text model's shape: a qwen3_5 model's ``text_config`` (empty where it has none), the table itself
    for a dense model."""
    return model.get("text_config", {}) if ModelKind.of(model) is ModelKind.QWEN3_5 else model


class TextConfig(Table):
    """``[model.text_config]``: a qwen3_5 model's text config, passed to the release's own
    ``Qwen3_5TextConfig`` (keys not declared here too)."""

    NAME = "model.text_config"
    num_hidden_layers = Key(Want.INT)
    num_key_value_heads = Key(Want.INT)
    num_attention_heads = Key(Want.INT)
    head_dim = Key(Want.INT)
    hidden_size = Key(Want.INT)
    intermediate_size = Key(Want.INT)
    vocab_size = Key(Want.INT)
    full_attention_interval = Key(Want.INT)
    linear_conv_kernel_dim = Key(Want.INT)
    linear_key_head_dim = Key(Want.INT)
    linear_value_head_dim = Key(Want.INT)
    linear_num_key_heads = Key(Want.INT)
    linear_num_value_heads = Key(Want.INT)
    max_position_embeddings = Key(Want.INT)
    partial_rotary_factor = Key(Want.NUMBER)
    mamba_ssm_dtype = Key(Want.STRING)


class VisionConfig(Table):
    """``[model.vision_config]``: a qwen3_5 model's vision tower, read for its RoPE cache."""

    NAME = "model.vision_config"
    hidden_size = Key(Want.INT)
    num_heads = Key(Want.INT)


class ModelShape(Table):
    """``[model]``: the model's kind and shape (a dense model's here, a qwen3_5 model's in
    ``text_config``)."""

    NAME = "model"
    kind = Key(Want.STRING, default=ModelKind.DENSE, read=ModelKind)
    architectures = Key(Want.STRINGS)
    num_hidden_layers = Key(Want.INT)
    num_key_value_heads = Key(Want.INT)
    head_dim = Key(Want.INT)
    context_len = Key(Want.INT)
    dtype = Key(Want.STRING, default="bfloat16")
    max_position_embeddings = Key(Want.INT)
    NESTED = {"text_config": TextConfig, "vision_config": VisionConfig}

    def __init__(self, values: Mapping = (), /):
        super().__init__(values)
        one_of(ModelKind, self.get("kind") or ModelKind.DENSE, "[model] kind")

    @property
    def text(self) -> Mapping:
        """The text model's shape (``text_config``)."""
        return text_config(self)
