"""GPU memory the release allocates between "Load weight end" and the sizing's own reading.

From v0.5.8, ``ModelRunner.load_model`` calls ``reserve_rope_cache_for_long_sequences``
(``utils/common.py``) right after it logs "Load weight end. avail mem": every rotary embedding
of the model whose ``cos_sin_cache`` has fewer rows than the context length + speculative
expansion + a safety margin is grown (``RotaryEmbedding._ensure_cos_sin_cache_length``:
``torch.cat`` of the old cache and the new rows into a new float32 tensor on the GPU, rows
aligned up).  The sizing's post-load reading (``_profile_available_bytes``, or
``profile_max_num_token``) is taken later, so it sees that memory gone while the log's does not.

For a Qwen3.5/3.6/3.8 model (``Qwen3_5ForConditionalGeneration``) two caches qualify:

* the text model's (M)RoPE cache: ``max_position_embeddings`` rows x ``head_dim x
  partial_rotary_factor`` (``models/qwen3_5.py``), grown when the context is not below
  max_position_embeddings - margin (the model's default context, 262,144);
* the vision tower's RoPE cache (``models/qwen3_vl.py``, ``Qwen3VLMoeVisionModel``):
  built with ``max_position=8192`` rows of ``head_dim // 2`` (head_dim = vision hidden_size /
  num_heads), so any context above 8192 - margin grows it to the context's length: a
  vision-sized cache the length of the whole context.

What the caching allocator keeps (``get_available_gpu_memory`` empties torch's cache before
each reading, so only segments still in use count): the new tensor's segment, by
PyTorch's rounding (``c10/cuda/CUDACachingAllocator.cpp``: a request up to 1 MiB takes a
2 MiB segment, under 10 MiB a 20 MiB one, from 10 MiB up a multiple of 2 MiB), less the old
tensor's segment when the old tensor had one of its own (10 MiB or more: released once freed);
an old tensor below 10 MiB shared its segment, which stays.  The expansion's temporaries are
freed before the reading.  This assumes no free cached block fits the new tensor (the
reading at "Load weight end" has just emptied the cache); the H200 measurement agrees
(docs/results/regress.md, "Where the logs' readings and the sizing's differ").

Used by the harness's child for a scenario's logged readings (``release_window.window``, then
``readings.derive``: the sizing's post-load reading is "Load weight end" less this), by the planner through
the same path, and by the tests that check it against the H200's measurements (tests/regress)."""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from ..model_shape import ModelKind, text_config

MIB = 1 << 20
SMALL_SIZE = 1 * MIB          # kSmallSize
SMALL_BUFFER = 2 * MIB        # kSmallBuffer
LARGE_BUFFER = 20 * MIB       # kLargeBuffer
MIN_LARGE_ALLOC = 10 * MIB    # kMinLargeAlloc
ROUND_LARGE = 2 * MIB         # kRoundLarge
CACHE_ITEMSIZE = 4            # the cos_sin_cache stays float32 on CUDA (RotaryEmbedding.__init__)
QWEN3_5_PARTIAL_ROTARY = 0.25 # Qwen3_5TextConfig's default (configs/qwen3_next.py), when the config omits it


class RopeInputsError(ValueError):
    """A scenario or tree lacks what the RoPE expansion needs."""


@dataclass(frozen=True)
class ReleaseRope:
    """The tree's own constants: whether ``load_model`` grows the caches, the environment
    defaults ``reserve_rope_cache_for_long_sequences`` reads, the vision cache's rows."""

    grows: bool
    margin: int = 0
    align: int = 1
    spec_safety: int = 0
    vision_rows: int | None = None
    # the vision tower's (hidden_size, num_heads) where a config.json gives no vision_config: the defaults of
    # the tree's own Qwen3VLVisionConfig (configs/qwen3_vl.py), which Qwen3_5VisionConfig extends
    vision_default: tuple[int, int] | None = None


@dataclass(frozen=True)
class RopeCache:
    name: str
    rows: int
    rotary_dim: int


def segment_bytes(nbytes: int) -> int:
    """The segment PyTorch's CUDA caching allocator reserves for a fresh request of ``nbytes``."""
    size = max(512, -(-nbytes // 512) * 512)
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def reserve_rows(context_len: int, spec_steps: int, spec_draft_tokens: int, rel: ReleaseRope) -> int:
    """``reserve`` of ``reserve_rope_cache_for_long_sequences``: the rows every cache must exceed."""
    reserve = context_len + spec_steps * spec_draft_tokens * rel.spec_safety + rel.margin
    return (reserve + rel.align - 1) // rel.align * rel.align


def grown_rows(cache: RopeCache, reserve: int, align: int) -> int | None:
    """``_ensure_cos_sin_cache_length(reserve - 1)``: the new row count, or None if unchanged."""
    needed = reserve - 1
    if needed < cache.rows:
        return None
    return (needed + align) // align * align


def kept_bytes(cache: RopeCache, new_rows: int) -> int:
    """Bytes the allocator holds after growing ``cache`` to ``new_rows`` (see the module doc)."""
    old = cache.rows * cache.rotary_dim * CACHE_ITEMSIZE
    new = new_rows * cache.rotary_dim * CACHE_ITEMSIZE
    released = segment_bytes(old) if old >= MIN_LARGE_ALLOC else 0
    return segment_bytes(new) - released


def expansion_bytes(caches: list[RopeCache], context_len: int, rel: ReleaseRope,
                    spec_steps: int = 0, spec_draft_tokens: int = 0) -> int:
    """GPU bytes the release's RoPE pre-expansion takes between "Load weight end" and the sizing."""
    if not rel.grows:
        return 0
    reserve = reserve_rows(context_len, spec_steps, spec_draft_tokens, rel)
    total = 0
    for c in caches:
        rows = grown_rows(c, reserve, rel.align)
        if rows is not None:
            total += kept_bytes(c, rows)
    return total


def model_caches(model: dict, rel: ReleaseRope) -> list[RopeCache]:
    """The RoPE caches of a scenario's ``[model]`` table: the text model's (its
    ``max_position_embeddings`` rows; ``head_dim x partial_rotary_factor``) and, for a
    Qwen3.5-family model, the vision tower's (``vision_config`` hidden_size / num_heads)."""
    kind = ModelKind.of(model)
    text = text_config(model)
    rows = text.get("max_position_embeddings")
    if rows is None:
        raise RopeInputsError(f"model {model.get('architectures')}: max_position_embeddings is needed for the "
                              "RoPE cache's rows (the published config.json value)")
    partial = text.get("partial_rotary_factor", QWEN3_5_PARTIAL_ROTARY if kind is ModelKind.QWEN3_5 else 1.0)
    caches = [RopeCache("text", int(rows), int(text["head_dim"] * partial))]
    if kind is ModelKind.QWEN3_5:
        vision = model.get("vision_config")
        if vision is None and rel.vision_default is not None:
            vision = {"hidden_size": rel.vision_default[0], "num_heads": rel.vision_default[1]}
        if vision is None:
            raise RopeInputsError("a qwen3_5 model needs [model.vision_config] hidden_size and num_heads "
                                  "(the published config.json's vision_config)")
        if rel.vision_rows is None:
            raise RopeInputsError("the tree's models/qwen3_vl.py builds no vision rotary embedding the harness reads")
        head_dim = vision["hidden_size"] // vision["num_heads"]
        caches.append(RopeCache("vision", rel.vision_rows, head_dim // 2))
    return caches


# rope types whose cos_sin_cache has max_position_embeddings rows (layers/rotary_embedding: the base class,
# Llama 3's, and the multimodal (M)RoPE of Qwen3.5); others (YaRN, dynamic NTK, LongRoPE, ...) size it otherwise
PLAIN_ROPE_TYPES = (None, "default", "llama3", "mrope")


def rope_type(model: dict) -> str | None:
    """The text model's rope type: ``rope_scaling`` / ``rope_parameters`` ``rope_type`` (or ``type``)."""
    text = text_config(model)
    for key in ("rope_scaling", "rope_parameters"):
        d = text.get(key) or model.get(key)
        if isinstance(d, dict) and (d.get("rope_type") or d.get("type")):
            return d.get("rope_type") or d.get("type")
    return None


@dataclass(frozen=True)
class Expansion:
    """The expansion's bytes, ``lo``..``hi`` (equal where the caches' rows are known), and how."""

    lo: int
    hi: int
    words: str


def expansion(model: dict, context_len: int, rel: ReleaseRope, spec_steps: int = 0,
              spec_draft_tokens: int = 0) -> Expansion:
    """The RoPE pre-expansion of a start: exact for the rope types whose cache rows are the config's
    ``max_position_embeddings``; for another type, from nothing to one fresh segment of every cache at the
    reserve's rows (the most it can keep: its new tensor, with the old one released or not)."""
    if not rel.grows:
        return Expansion(0, 0, "this release does not pre-expand RoPE caches after loading")
    reserve = reserve_rows(context_len, spec_steps, spec_draft_tokens, rel)
    caches = model_caches(model, rel)
    kind = rope_type(model)
    if kind not in PLAIN_ROPE_TYPES:
        rows = (reserve - 1 + rel.align) // rel.align * rel.align
        hi = sum(segment_bytes(rows * c.rotary_dim * CACHE_ITEMSIZE) for c in caches)
        return Expansion(0, hi, f"rope type {kind!r}: its cache rows are not modelled; up to a fresh segment "
                                f"of {rows:,} rows per cache ({', '.join(c.name for c in caches)})")
    b = expansion_bytes(caches, context_len, rel, spec_steps, spec_draft_tokens)
    grown = [f"{c.name} {c.rows:,} -> {grown_rows(c, reserve, rel.align):,} rows" for c in caches
             if grown_rows(c, reserve, rel.align) is not None]
    return Expansion(b, b, f"reserve_rope_cache_for_long_sequences at context {context_len:,}: "
                           + (", ".join(grown) + f", {b:,} B kept" if grown else "no cache grows"))


ENV_NAMES = {"margin": "SGLANG_ROPE_CACHE_SAFETY_MARGIN", "align": "SGLANG_ROPE_CACHE_ALIGN",
             "spec_safety": "SGLANG_SPEC_EXPANSION_SAFETY_FACTOR"}


def with_environment(rel: ReleaseRope, environ) -> ReleaseRope:
    """The constants as the release's ``envs.NAME.get()`` reads them: the caller's setting where there is one."""
    if not rel.grows:
        return rel
    set_ = {k: int(environ[v]) for k, v in ENV_NAMES.items() if str(environ.get(v, "")).strip()}
    return dataclasses.replace(rel, **set_) if set_ else rel


def scenario_expansion_bytes(model: dict, server: dict, rel: ReleaseRope) -> int:
    """The expansion for a scenario: context = ``--context-length`` or the model's context_len
    (``server_args.context_length or model_config.context_len``, as the release reads it)."""
    context = server.get("context_length") or model["context_len"]
    return expansion_bytes(model_caches(model, rel), int(context), rel,
                           int(server.get("speculative_num_steps") or 0),
                           int(server.get("speculative_num_draft_tokens") or 0))


_ENV = r"^\s*{name}\s*=\s*EnvInt\((\d+)\)"


def release_rope(source_root: Path) -> ReleaseRope:
    """Read the tree's constants: the call in ``model_executor/model_runner.py``, the three
    ``EnvInt`` defaults of ``environ.py``, the vision tower's ``max_position`` in
    ``models/qwen3_vl.py``."""
    srt = Path(source_root) / "sglang" / "srt"
    runner = (srt / "model_executor" / "model_runner.py").read_text(encoding="utf-8")
    if "reserve_rope_cache_for_long_sequences(" not in runner:
        return ReleaseRope(grows=False)
    env = (srt / "environ.py").read_text(encoding="utf-8")
    values = {}
    for key, name in ENV_NAMES.items():
        m = re.search(_ENV.format(name=name), env, re.M)
        if not m:
            raise RopeInputsError(f"{srt / 'environ.py'}: no EnvInt default for {name}")
        values[key] = int(m.group(1))
    vl = srt / "models" / "qwen3_vl.py"
    vision_rows = None
    if vl.is_file():
        m = re.search(r"self\.rotary_pos_emb\s*=\s*get_rope\((.*?)\n\s*\)", vl.read_text(encoding="utf-8"), re.S)
        if m and "rotary_dim=head_dim // 2" in m.group(1):
            rows = re.search(r"max_position=(\d+)", m.group(1))
            vision_rows = int(rows.group(1)) if rows else None
    return ReleaseRope(grows=True, vision_rows=vision_rows, vision_default=_vision_default(srt), **values)


def _vision_default(srt: Path) -> tuple[int, int] | None:
    """(hidden_size, num_heads): the defaults of ``Qwen3VLVisionConfig.__init__`` in configs/qwen3_vl.py."""
    path = srt / "configs" / "qwen3_vl.py"
    if not path.is_file():
        return None
    for cls in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(cls, ast.ClassDef) and cls.name == "Qwen3VLVisionConfig":
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    args = fn.args.args[len(fn.args.args) - len(fn.args.defaults):]
                    found = {a.arg: d.value for a, d in zip(args, fn.args.defaults) if isinstance(d, ast.Constant)}
                    if isinstance(found.get("hidden_size"), int) and isinstance(found.get("num_heads"), int):
                        return found["hidden_size"], found["num_heads"]
    return None
