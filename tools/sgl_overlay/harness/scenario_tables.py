"""The types a scenario file's values must have (docs/scenarios.md, "Tables and keys"), checked in one
place before any run: a value of the wrong type (``total_mib = "97887"``, ``num_hidden_layers =
"sixty-four"``) is bad input (exit 2) naming the file, the table, the key and the type wanted, not a
figure computed from a string or a TypeError deep in the release's code (exit 125).

Keys not listed here are passed on as given: ``[server]`` keys to the release's own ``ServerArgs``
(whose resolution takes them as its server would), other keys of ``[model.text_config]`` to the
release's config class."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Want(Enum):
    """A type a key's value must have, with its words for a message and an example value."""

    INT = ("an integer", "64")
    NUMBER = ("a number", "0.85")
    STRING = ("a string", '"bfloat16"')
    BOOL = ("true or false", "true")
    INTS = ("a list of integers", "[9, 0]")
    STRINGS = ("a list of strings", '["LlamaForCausalLM"]')

    def __init__(self, words: str, example: str):
        self.words, self.example = words, example

    def holds(self, value) -> bool:
        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        if self is Want.INT:
            return is_int(value)
        if self is Want.NUMBER:
            return is_int(value) or isinstance(value, float)
        if self is Want.STRING:
            return isinstance(value, str)
        if self is Want.BOOL:
            return isinstance(value, bool)
        if self is Want.INTS:
            return isinstance(value, list) and all(is_int(v) for v in value)
        return isinstance(value, list) and all(isinstance(v, str) for v in value)


# table -> key -> the type its value must have ("" is the file's top level)
KEYS: dict[str, dict[str, Want]] = {
    "": {"name": Want.STRING, "description": Want.STRING},
    "gpu": {
        "pre_load_free_gib": Want.NUMBER, "post_load_free_gib": Want.NUMBER, "readings": Want.STRING,
        "pre_rounding_gib": Want.NUMBER, "post_rounding_gib": Want.NUMBER, "integrated": Want.BOOL,
        "device_name": Want.STRING, "capability": Want.INTS, "total_mib": Want.INT, "weights_gib": Want.NUMBER,
        "world_size": Want.INT, "gpu_count": Want.INT, "cuda": Want.STRING,
    },
    "model": {
        "kind": Want.STRING, "architectures": Want.STRINGS, "num_hidden_layers": Want.INT,
        "num_key_value_heads": Want.INT, "head_dim": Want.INT, "context_len": Want.INT, "dtype": Want.STRING,
        "max_position_embeddings": Want.INT,
    },
    "model.text_config": {
        "num_hidden_layers": Want.INT, "num_key_value_heads": Want.INT, "num_attention_heads": Want.INT,
        "head_dim": Want.INT, "hidden_size": Want.INT, "intermediate_size": Want.INT, "vocab_size": Want.INT,
        "full_attention_interval": Want.INT, "linear_conv_kernel_dim": Want.INT,
        "linear_key_head_dim": Want.INT, "linear_value_head_dim": Want.INT, "linear_num_key_heads": Want.INT,
        "linear_num_value_heads": Want.INT, "max_position_embeddings": Want.INT,
        "partial_rotary_factor": Want.NUMBER, "mamba_ssm_dtype": Want.STRING,
    },
    "model.vision_config": {"hidden_size": Want.INT, "num_heads": Want.INT},
    "draft": {"num_hidden_layers": Want.INT, "block_size": Want.INT, "num_key_value_heads": Want.INT,
              "head_dim": Want.INT, "weights_gib": Want.NUMBER},
    "expect": {"pass": Want.STRINGS, "message": Want.STRING, "remedy": Want.STRING, "case": Want.STRING},
    "expect.logged": {"max_total_num_tokens": Want.INT, "max_running_requests": Want.INT,
                      "max_mamba_cache_size": Want.INT},
    "source": {"url": Want.STRING, "release": Want.STRING, "status": Want.STRING, "reason": Want.STRING,
               "hf_id": Want.STRING, "command_url": Want.STRING, "weights_logged_gib": Want.NUMBER,
               "safetensors_total_size": Want.INT, "witness_post_load_free_gib": Want.NUMBER},
}
@dataclass(frozen=True)
class WrongType:
    """A value of a type its key does not take."""

    table: str
    key: str
    value: object
    want: Want

    def message(self) -> str:
        where = f"[{self.table}] {self.key}" if self.table else self.key
        return f"{where} must be {self.want.words}, not {self.value!r} ({_kind(self.value)}); {self.fix()}"

    def fix(self) -> str:
        """The line to write: the value without its quotes where it reads as the type wanted, else an example."""
        if isinstance(self.value, str) and self.want in (Want.INT, Want.NUMBER):
            for conv in ((int,) if self.want is Want.INT else (int, float)):
                try:
                    return f"write {self.key} = {conv(self.value)} (without quotes)"
                except ValueError:
                    pass
        return f"write it as {self.want.words}, e.g. {self.key} = {self.want.example}"


def _kind(value) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


def _table(data: dict, dotted: str):
    t = data
    for part in filter(None, dotted.split(".")):
        t = t.get(part) if isinstance(t, dict) else None
    return t


def wrong_types(data: dict) -> list[WrongType]:
    """Every listed key of the parsed file whose value is not of its type, in table order; and every
    ``[expect] figures`` value that is not an integer (the figures are counts)."""
    out = []
    for dotted, keys in KEYS.items():
        table = _table(data, dotted)
        if not isinstance(table, dict):
            continue
        for key, want in keys.items():
            if key in table and not want.holds(table[key]):
                out.append(WrongType(dotted, key, table[key], want))
    figures = _table(data, "expect.figures")
    for key, value in (figures or {}).items() if isinstance(figures, dict) else ():
        if not Want.INT.holds(value):
            out.append(WrongType("expect.figures", key, value, Want.INT))
    return out

