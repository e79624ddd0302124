"""The model a scenario's ``[model]`` table describes: its kind (``ModelKind``) and where its text
model's shape is (``text_config``).  Pure; read by the scenario's checks, the child's model config
(child/drivers/inputs.py), the RoPE pre-expansion (child/rope_reserve.py) and the planner."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum


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
