"""The weights' byte size, for a model directory with or without its checkpoint.

Three sources, first found wins (the plan says which):

* ``--weights-gib`` (given);
* ``model.safetensors.index.json``'s ``metadata.total_size``: every tensor the
  checkpoint stores;
* an estimate from ``config.json`` alone, the way ``accelerate estimate-memory``
  makes one: the config's own transformers class (its ``architectures[0]``, else
  the Auto class that maps its config type) is instantiated on the meta device
  (no memory, nothing downloaded), the quantization config applied by
  transformers' own quantizer (``AutoHfQuantizer.preprocess_model``, the step
  ``from_pretrained`` runs on the meta skeleton of a pre-quantized checkpoint),
  and every parameter and persistent buffer counted once (tied embeddings are one
  tensor) at its dtype's byte size.

What the estimate cannot see is named in the plan: tensors a checkpoint carries
that the transformers class does not define (an MTP / next-token-prediction
layer, docs/results/plan.md's error table).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .. import extras

INDEX = "model.safetensors.index.json"
# quant_method values whose checkpoint layout the estimate reproduces (with
# transformers' own module replacement), each checked in tests/plan/test_weights.py
SUPPORTED_QUANT = ("fp8",)
# The Auto classes tried, in order, when transformers has no class named by
# the config's architectures[0] (accelerate estimate-memory tries AutoModel).
AUTO_CLASSES = ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel")


@dataclass(frozen=True)
class Weights:
    bytes: int
    source: str  # in words, for the plan's assumptions
    method: str  # "given" | "index" | "config"
    by_dtype: dict | None = None  # config estimate: {dtype name: bytes}


def given(gib: float) -> Weights:
    return Weights(int(gib * (1 << 30)), f"--weights-gib {gib}", "given")


def from_index(index: Path, read_json) -> Weights:
    total = (read_json(index, "safetensors index").get("metadata") or {}).get("total_size")
    if not isinstance(total, int) or total <= 0:
        raise UsageError(f"{index}: no positive metadata.total_size",
                         hint="fix the index file, or pass --weights-gib")
    return Weights(total, f"{index.name} metadata.total_size = {total:,} B (every tensor in the checkpoint)", "index")


def from_safetensors(files: list[Path]) -> Weights:
    """The tensors' bytes of safetensors files, from each file's header (the format's
    first 8 bytes are the header's length, little-endian; the header is JSON giving
    every tensor's ``data_offsets``): what a checkpoint without an index holds."""
    import json
    import struct

    total = 0
    for f in files:
        try:
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            total += sum(t["data_offsets"][1] - t["data_offsets"][0]
                         for k, t in header.items() if k != "__metadata__")
        except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError) as e:
            raise UsageError(f"{f}: not a readable safetensors file ({e})",
                             hint="check the file, or remove it from the directory") from None
    names = ", ".join(f.name for f in files)
    return Weights(total, f"the tensors of {names} = {total:,} B (their headers)", "safetensors")


def checkpoint(directory: Path, read_json) -> Weights | None:
    """A checkpoint's weights from its index, else from its safetensors files; None
    where the directory has neither."""
    index = directory / INDEX
    if index.is_file():
        return from_index(index, read_json)
    files = sorted(directory.glob("*.safetensors"))
    return from_safetensors(files) if files else None


def _way_out(path: Path) -> str:
    return (f"put the checkpoint's {INDEX} next to {path.name}, or pass --weights-gib GIB "
            "(the checkpoint's size per its model page)")


def _dtype_name(cfg: dict) -> str | None:
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    for d in (cfg, text):
        for key in ("torch_dtype", "dtype"):
            if isinstance(d.get(key), str):
                return d[key]
    return None


def _quantization(cfg: dict) -> dict | None:
    qc = cfg.get("quantization_config")
    if qc is None and isinstance(cfg.get("text_config"), dict):
        qc = cfg["text_config"].get("quantization_config")
    return qc


def _model_class(transformers, config, arch: str):
    """The class ``from_pretrained`` would build: the config's architectures[0]
    when transformers has it for this config type, else the first Auto class
    mapping the config type."""
    cls = getattr(transformers, arch, None) if arch else None
    if cls is not None and isinstance(config, getattr(cls, "config_class", ()) or ()):
        return cls
    for auto in AUTO_CLASSES:
        mapping = getattr(getattr(transformers, auto), "_model_mapping")
        try:
            return mapping[type(config)]
        except (KeyError, ValueError):
            continue
    return None


@contextlib.contextmanager
def _quiet():
    """transformers logs and warns while building a skeleton (initialisation,
    rope defaults); none of it is about the estimate."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield
    finally:
        logger.setLevel(level)


def count(model) -> Counter:
    """Bytes by dtype of what a checkpoint of ``model`` stores: every parameter once
    (``named_parameters`` drops a tied tensor's second name) and every persistent
    buffer (a non-persistent one, such as a rotary ``inv_freq``, is not saved)."""
    out: Counter = Counter()
    for _, p in model.named_parameters():
        out[str(p.dtype).removeprefix("torch.")] += p.numel() * p.element_size()
    for mod in model.modules():
        skip = getattr(mod, "_non_persistent_buffers_set", set())
        for name, b in mod._buffers.items():
            if b is not None and name not in skip:
                out[str(b.dtype).removeprefix("torch.")] += b.numel() * b.element_size()
    return out


def from_config(path: Path, cfg: dict) -> Weights:
    """The estimate from config.json (module docstring); UsageError (exit 2) names
    what it cannot do and the way out."""
    if not extras.importable("transformers"):
        raise UsageError(
            f"{path.parent}: no {INDEX}, and estimating the weights from {path.name} needs the Python package "
            f"'transformers', which is not installed",
            hint="install it: python -m pip install -e '.[plan]' (docs/dependencies.md); or " + _way_out(path))
    qc = _quantization(cfg)
    method = (qc or {}).get("quant_method") if isinstance(qc, dict) else None
    if qc is not None and method not in SUPPORTED_QUANT:
        raise UsageError(
            f"{path}: quantization method {method!r} (quantization_config.quant_method): the weights estimate "
            f"from config.json supports {', '.join(SUPPORTED_QUANT)} only",
            hint=_way_out(path))
    dtype_name = _dtype_name(cfg)
    import torch

    dtype = getattr(torch, dtype_name, None) if dtype_name else None
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise UsageError(f"{path}: torch_dtype/dtype {dtype_name!r} is not a floating-point torch dtype, so the "
                         f"checkpoint's bytes per weight are unknown", hint=_way_out(path))
    with _quiet():
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        model_type = cfg.get("model_type")
        if model_type not in CONFIG_MAPPING:
            raise UsageError(
                f"{path}: model_type {model_type!r} is unknown to transformers {transformers.__version__}, so the "
                f"weights cannot be estimated from the config", hint=_way_out(path))
        arch = (cfg.get("architectures") or [""])[0]
        try:
            config = CONFIG_MAPPING[model_type].from_dict(dict(cfg))
            cls = _model_class(transformers, config, arch)
            if cls is None:
                raise UsageError(
                    f"{path}: transformers {transformers.__version__} has no model class for {arch!r} "
                    f"(model_type {model_type!r}; tried {arch} and {', '.join(AUTO_CLASSES)})", hint=_way_out(path))
            with torch.device("meta"):
                model = cls._from_config(config, dtype=dtype)
                if qc is not None:
                    from transformers.quantizers.auto import AutoHfQuantizer

                    AutoHfQuantizer.from_config(dict(qc), pre_quantized=True).preprocess_model(model, dtype=dtype)
        except UsageError:
            raise
        except Exception as e:  # noqa: BLE001 - transformers' own refusal, named with its class
            raise UsageError(f"{path}: transformers {transformers.__version__} could not build "
                             f"{arch or model_type} on the meta device: {type(e).__name__}: {e}",
                             hint=_way_out(path)) from None
    by_dtype = count(model)
    total = sum(by_dtype.values())
    parts = ", ".join(f"{b:,} B {d}" for d, b in sorted(by_dtype.items(), key=lambda kv: -kv[1]))
    quant = f"; quantization_config {method} applied by transformers' own quantizer" if qc is not None else ""
    return Weights(total, (
        f"estimated from {path.name} (no {INDEX}): {cls.__name__} instantiated on the meta device with "
        f"transformers {transformers.__version__}, parameters and persistent buffers counted once at their dtype "
        f"({parts}){quant} = {total:,} B; tensors the checkpoint stores beyond the class (an MTP layer) are not "
        f"counted"), "config", dict(by_dtype))
