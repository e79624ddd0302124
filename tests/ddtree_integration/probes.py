"""Probes run in a fresh interpreter against one tree (see child.py).

Each probe loads only the real upstream/overlay modules it names through the
regression harness's targeted loader; GPU-only modules are inert stand-ins.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

SPEC = "sglang.srt.speculative"

# Constants that ServerArgs.add_cli_args concatenates into argparse choices;
# their modules are not loaded (utils/common.py pulls in the GPU stack).
ARGPARSE_CONSTANTS = {
    "SUPPORTED_LORA_TARGET_MODULES": [],
    "LORA_TARGET_ALL_MODULES": "all",
}


def _install(root: str, real: list[str]):
    import importlib.util
    import sys

    from tools.sglo.harness import loader
    from tools.sglo.harness.standins import install_transformers_standin

    install_transformers_standin()
    if importlib.util.find_spec("triton") is None:
        for name in ("triton", "triton.language"):
            sys.modules.setdefault(name, loader.StubModule(name))
    base = Path(root)
    present = [m for m in real if (base / Path(*m.split("."))).with_suffix(".py").is_file()]
    return loader.install(base, present), loader


def algorithm(root: str) -> dict:
    """What ``SpeculativeAlgorithm.from_string("DDTREE")`` gives in this tree."""
    _, loader = _install(root, [f"{SPEC}.spec_info", f"{SPEC}.spec_registry", f"{SPEC}.ddtree_algo"])
    spec_info = loader.load(f"{SPEC}.spec_info")
    algo = spec_info.SpeculativeAlgorithm.from_string("ddtree")
    out = {
        "class": type(algo).__name__,
        "name": algo.name,
        "is_dflash": algo.is_dflash(),
        "is_ddtree": getattr(algo, "is_ddtree", lambda: False)(),
        "is_eagle": algo.is_eagle(),
        "is_speculative": algo.is_speculative(),
        "supports_spec_v2": algo.supports_spec_v2(),
        "has_validator": getattr(algo, "validate_server_args", None) is not None,
    }

    class _Args:  # the two fields create_worker reads
        disable_overlap_schedule = False

    try:
        algo.create_worker(_Args())
        out["overlap_refusal"] = None
    except ValueError as e:
        out["overlap_refusal"] = str(e)
    return out


_SERVER_ARGS_LOADER = None


def _remember(loader) -> None:
    global _SERVER_ARGS_LOADER
    _SERVER_ARGS_LOADER = (None, loader)


def server_rules(root: str, argv: list[str]) -> dict:
    """Parse ``argv`` with the tree's own ServerArgs.add_cli_args, then run its
    grammar-backend and speculative-decoding rules (the registry's validator
    hook included) on an instance holding the parsed values."""
    _, loader = _SERVER_ARGS_LOADER or _install(
        root,
        [
            "sglang.srt.server_args",
            "sglang.srt.environ",
            f"{SPEC}.spec_info",
            f"{SPEC}.spec_registry",
            f"{SPEC}.ddtree_algo",
        ],
    )
    # argparse choices built from constants of modules that stay stand-ins
    loader.set_fakes(ARGPARSE_CONSTANTS)
    sa_mod = loader.load("sglang.srt.server_args")
    _remember(loader)
    # The alias resolver opens the draft model's config (network/disk); DDTREE has no alias.
    sa_mod._resolve_speculative_algorithm_alias = lambda algo, *a, **k: algo
    cls = sa_mod.ServerArgs
    parser = argparse.ArgumentParser()
    cls.add_cli_args(parser)
    try:
        ns = parser.parse_args(["--model-path", "m"] + list(argv))
    except SystemExit as e:
        raise ValueError(f"argparse refused {argv}: exit {e.code}") from None
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        if hasattr(ns, f.name):
            value = getattr(ns, f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(obj, f.name, value)
    obj._handle_grammar_backend()
    obj._handle_speculative_decoding()
    keys = (
        "speculative_algorithm",
        "speculative_ddtree_budget",
        "speculative_dflash_block_size",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "disable_overlap_schedule",
        "max_running_requests",
        "grammar_backend",
    )
    return {k: getattr(obj, k, "<no such field>") for k in keys}


def server_rules_many(root: str, argvs: list[list[str]]) -> list[dict]:
    """``server_rules`` for several command lines in one interpreter (the module
    is loaded once; each command line gets a fresh instance)."""
    out = []
    for argv in argvs:
        try:
            out.append({"ok": True, "value": server_rules(root, argv)})
        except Exception as e:  # noqa: BLE001 - a refusal is a result
            out.append({"ok": False, "type": type(e).__name__, "message": str(e)})
    return out
