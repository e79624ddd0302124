"""Server flags SGLang renamed, with where each rename is in the releases' own code: the remedy the
harness and the planner state when a release's parser refuses the old spelling (pure data).

A release's parser decides what it takes (``release_parser.py``): a release that keeps the old flag
as a deprecated alias sets the new field from it, one that dropped it refuses it ("unrecognized
arguments", or "ambiguous option" where the old flag is a prefix of new ones).  This table only
names the flag to write instead."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rename:
    """``old`` (a ServerArgs field, i.e. the flag ``--old-name``) became ``new``."""

    old: str
    new: str
    aliased: str  # a release checked to take the old flag as a deprecated alias of the new one
    refused: str  # a release checked to refuse the old flag
    source: str  # where the releases' code shows it

    @property
    def old_flag(self) -> str:
        return flag_of(self.old)

    @property
    def new_flag(self) -> str:
        return flag_of(self.new)

    def remedy(self, value=None) -> str:
        """The line to write instead, in the flag's form and the scenario's."""
        shown = "" if value is None or value is True else f" {value}"
        key = "" if value is None else f" ([server] {self.new} = {_toml(value)})"
        return (f"use {self.new_flag}{shown}{key}: {self.old_flag} was renamed {self.new_flag} "
                f"({self.aliased} takes the old flag as a deprecated alias, {self.refused} refuses it: {self.source})")


def flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


RENAMES: tuple[Rename, ...] = (
    Rename("mamba_scheduler_strategy", "mamba_radix_cache_strategy", aliased="v0.5.17", refused="v0.5.23",
           source="v0.5.17 sglang/srt/server_args.py declares --mamba-scheduler-strategy with "
                  "DeprecatedAliasStoreAction, new_flag --mamba-radix-cache-strategy; v0.5.23 "
                  "sglang/srt/arg_groups/fields/exec_.py declares only mamba_radix_cache_strategy"),
    Rename("cuda_graph_max_bs", "cuda_graph_max_bs_decode", aliased="v0.5.17", refused="v0.5.23",
           source="v0.5.17 sglang/srt/server_args.py declares --cuda-graph-max-bs with "
                  "DeprecatedAliasStoreAction, new_flag --cuda-graph-max-bs-decode; v0.5.23's parser "
                  "declares only --cuda-graph-max-bs-decode and --cuda-graph-max-bs-prefill"),
)


def renamed(field: str) -> Rename | None:
    """The rename of ``field`` (a ServerArgs field name or its flag), or None."""
    key = field.removeprefix("--").split("=", 1)[0].replace("-", "_")
    return next((r for r in RENAMES if r.old == key), None)


def respell(server: dict) -> dict:
    """``server`` with every renamed key in its new spelling (a key given in both keeps the new one's
    value): the remedy of a refusal by a release that dropped the old flags (v0.5.23), applied."""
    out = {}
    for key, value in server.items():
        rename = renamed(key)
        if rename is None:
            out[key] = value
        elif rename.new not in server:
            out[rename.new] = value
    return out
