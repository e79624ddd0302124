"""The small stand-ins the harness gives upstream code in place of a GPU server.

Everything here is either a *view* (an object whose attributes come from the
scenario; reading an attribute the scenario does not provide raises
``MissingInput`` naming it) or a *GPU query* replaced by the scenario's figure.
Nothing here restates upstream's sizing arithmetic.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

from . import loader, scoped

GIB = 1 << 30


# what a user can do when the tree reads an input no scenario key gives
NOT_MODELLED = ("the harness does not model this input yet, so it cannot drive this tree for this "
                "scenario; run a release it drives, or see docs/harness.md, 'Supporting a new release'")


class MissingInput(AttributeError):
    """Upstream read something the harness does not provide (-> untestable).

    ``message`` replaces the default text where the user can supply the input
    (a scenario key: ``missing_scenario_keys``)."""

    def __init__(self, owner: str, name: str, message: str | None = None):
        self.owner = owner
        self.attr = name
        super().__init__(message or f"upstream read {owner}.{name}, which the harness does not provide; {NOT_MODELLED}")


def _toml_value(v) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def missing_scenario_keys(table: str, keys: list[str], example: dict, why: str) -> MissingInput:
    """The error for keys a scenario's ``[table]`` lacks: names them, says why the
    tree needs them and shows the lines to add (``example``: key -> value)."""
    lines = "\n".join(f"{k} = {_toml_value(example[k])}" for k in keys)
    return MissingInput(table, ", ".join(keys),
                        f"the scenario's [{table}] table lacks {', '.join(keys)} ({why}); add "
                        f"{'it' if len(keys) == 1 else 'them'} to the scenario file, e.g.\n[{table}]\n{lines}")


class View:
    """Attribute bag that records reads and names what is missing."""

    _owner = "view"

    def __init__(self, owner: str, reads: set, **values):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_reads", reads)
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def __getattribute__(self, name):
        if not name.startswith("_"):
            object.__getattribute__(self, "_reads").add(
                f"{object.__getattribute__(self, '_owner')}.{name}"
            )
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise MissingInput(object.__getattribute__(self, "_owner"), name)

    def __repr__(self):
        return f"<{self._owner} view>"


class ModelConfigView(View):
    def get_num_kv_heads(self, tensor_parallel_size, *args, **kwargs) -> int:
        # Same rule as upstream's ModelConfig.get_num_kv_heads for replicated heads.
        return max(1, self.num_key_value_heads // tensor_parallel_size)

    def get_total_num_kv_heads(self) -> int:
        return self.num_key_value_heads


class WorldGroup:
    def __init__(self, world_size: int):
        self.world_size = world_size
        self.cpu_group = None
        self.device_group = None
        self.rank = 0
        self.rank_in_group = 0
        self.local_rank = 0


class GPU:
    """The scenario's memory readings, in place of ``get_available_gpu_memory``."""

    def __init__(self, post_load_free_gib: float, world_size: int, attn_tp_size: int, per_rank=None):
        self.post_load_free_gib = post_load_free_gib
        # Free memory after the weights, per world rank (default: every rank alike).
        self.per_rank = [float(x) for x in per_rank] if per_rank else [post_load_free_gib] * world_size
        if min(self.per_rank) != post_load_free_gib or len(self.per_rank) != world_size:
            raise ValueError("post_load_free_gib_per_rank must have world_size entries whose minimum "
                             "is post_load_free_gib")
        self.world = WorldGroup(world_size)
        self.attn_tp_size = attn_tp_size
        self.queries = 0

    def shift(self, gib: float) -> None:
        """Move the post-load reading (every rank's) by ``gib``: the sizing's own, from a log's."""
        if gib:
            self.post_load_free_gib += gib
            self.per_rank = [x + gib for x in self.per_rank]

    def get_available_gpu_memory(self, *args, **kwargs) -> float:
        self.queries += 1
        return self.post_load_free_gib

    def free_memory_per_rank(self, *args, **kwargs) -> list:
        """In place of the memory patches' per-rank gather (a collective over the world group)."""
        self.queries += 1
        return list(self.per_rank)

    def get_world_group(self):
        return self.world

    def get_attention_tp_size(self):
        return self.attn_tp_size

    def module_fakes(self) -> dict[str, Any]:
        """Module-level names replaced in every real module that binds them."""
        false = lambda *a, **k: False  # noqa: E731 - model-type checks: not DeepSeek/FP4
        return {
            "get_available_gpu_memory": self.get_available_gpu_memory,
            "free_memory_per_rank": self.free_memory_per_rank,
            "get_world_group": self.get_world_group,
            "get_attention_tp_size": self.get_attention_tp_size,
            "get_attention_dp_size": lambda: 1,
            "is_float4_e2m1fn_x2": false,
            "is_deepseek_nsa": false,
            "is_deepseek_dsa": false,
            "is_deepseek_v4": false,
            "is_minimax_sparse": false,
            "configured_pp_size": lambda *a, **k: 1,
            # v0.5.23: linear-attention TP equals attention TP on one node; no QSA profile
            "linear_attn_tp_size": lambda *a, **k: self.attn_tp_size,
            "parse_qsa_profile": lambda *a, **k: None,
            # v0.5.20+: resolved flags are read through resolving_view(server_args)
            "resolving_view": lambda args, *a, **k: args,
            "resolved_view": lambda args, *a, **k: args,
            # v0.5.19+: release rules declare their results (arg_groups.overrides) instead
            # of writing the fields; the views above are the args themselves, so write them
            "declare_resolution": declare_resolution,
            # attention backends are not chosen on a CPU: (target, draft) both default
            "attention_backends_of": lambda *a, **k: (None, None),
            # context-parallel layer split is off: every rank owns all its layers
            "get_glm_dsa_layer_split_effective_num_layers": lambda runner, num_layers: num_layers,
        }


def declare_resolution(args, source, **fields) -> None:
    """In place of arg_groups.overrides.declare_resolution (v0.5.19+)."""
    for k, v in fields.items():
        object.__setattr__(args, k, v)


def install_transformers_standin() -> bool:
    """Give upstream config classes a minimal ``transformers.PretrainedConfig``
    (``transformers_standin_modules``), for the rest of the process.  Returns
    True when it was installed by this call."""
    if _transformers_standin_present():
        return False
    sys.modules.update(transformers_standin_modules())
    return True


@contextlib.contextmanager
def transformers_standin() -> Iterator[bool]:
    """``install_transformers_standin`` for the block of a ``with`` statement:
    yields whether it was installed by this call; at the end ``sys.modules``
    holds the ``transformers`` modules it held before (or none)."""
    if _transformers_standin_present():
        yield False
        return
    with scoped.modules(transformers_standin_modules()):
        yield True


def _transformers_standin_present() -> bool:
    return bool(getattr(sys.modules.get("transformers"), "__sgl_overlay_standin__", False))


def transformers_standin_modules() -> dict[str, types.ModuleType]:
    """A minimal ``transformers`` package: its ``PretrainedConfig``, by module name.

    SGLang's own config classes (e.g. ``Qwen3NextConfig``) subclass it and only
    need keyword storage.  Installed in the harness's child interpreters whether
    or not transformers is installed (the ``[plan]`` extra brings it, and
    ``[test]`` includes that): the figures must not depend on the environment,
    and importing the real package costs about 1.5 s of each run's sizing step
    (0.15 s -> 1.7 s for healthy-h200-8b at v0.5.12.post1, docs/harness.md), for
    the same figures.
    """

    class PretrainedConfig:
        model_type = ""
        sub_configs: dict = {}

        def __init__(self, **kwargs):
            for k, v in kwargs.items():
                setattr(self, k, v)

        def get_text_config(self, *args, **kwargs):
            return getattr(self, "text_config", self)

    import logging

    tf = types.ModuleType("transformers")
    tf.__path__ = []
    tf.__sgl_overlay_standin__ = True
    cu = types.ModuleType("transformers.configuration_utils")
    cu.PretrainedConfig = PretrainedConfig
    ut = types.ModuleType("transformers.utils")
    ut.__path__ = []
    lg = types.ModuleType("transformers.utils.logging")
    lg.get_logger = logging.getLogger
    ut.logging = lg
    tf.PretrainedConfig = PretrainedConfig
    tf.configuration_utils = cu
    tf.utils = ut
    return {
        "transformers": tf,
        "transformers.configuration_utils": cu,
        "transformers.utils": ut,
        "transformers.utils.logging": lg,
    }


# Triton, the GPU compiler: imported at module level by the releases from v0.5.18.
TRITON_MODULES = ("triton", "triton.language")


def triton_standin_modules() -> dict[str, types.ModuleType]:
    """Inert stand-ins (``loader.StubModule``) for Triton's modules where Triton
    is not installed, by module name; none where it is, or where a module of
    that name is already loaded (a stand-in put there before, or the real one)."""
    if "triton" in sys.modules or importlib.util.find_spec("triton") is not None:
        return {}
    return {name: loader.StubModule(name) for name in TRITON_MODULES if name not in sys.modules}


def install_triton_standin() -> list[str]:
    """``triton_standin_modules`` in ``sys.modules`` for the rest of the
    process; returns the names it put there."""
    found = triton_standin_modules()
    sys.modules.update(found)
    return list(found)


@contextlib.contextmanager
def triton_standin() -> Iterator[list[str]]:
    """``install_triton_standin`` for the block of a ``with`` statement: yields
    the names it put in ``sys.modules``, which are gone at the end."""
    found = triton_standin_modules()
    with scoped.modules(found):
        yield list(found)
