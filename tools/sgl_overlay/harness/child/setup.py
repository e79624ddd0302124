"""The child's import environment, the same for each of its jobs (a sizing, a flag parse): the
``transformers`` and Triton stand-ins, and the targeted loader serving the tree's real modules (every
other ``sglang.*`` module an inert stand-in).  ``import_environment`` installs them in that order and
undoes them, last first, at the end of its block, or at once where a step fails."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import loader
from .standins import transformers_standin, triton_standin


def arg_group_modules(root: Path) -> list[str]:
    """The modules of the release's flag-resolution package (``sglang/srt/arg_groups``, v0.5.13+; from
    v0.5.16 the flag tables are declared there), sorted; [] where the tree has none."""
    groups = root / "sglang" / "srt" / "arg_groups"
    if not groups.is_dir():
        return []
    return sorted(".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                  for p in groups.rglob("*.py"))


@dataclass(frozen=True)
class ImportEnvironment:
    transformers_standin: bool  # whether this block installed the transformers stand-in
    finder: loader.TreeFinder


@contextlib.contextmanager
def import_environment(root: Path, real: list[str], fakes: dict | None = None) -> Iterator[ImportEnvironment]:
    """The stand-ins and the loader for ``real`` modules of the tree at ``root`` (``fakes``: the names
    every stand-in answers, ``loader.installed``), for the block of a ``with`` statement."""
    with contextlib.ExitStack() as stack:
        installed = stack.enter_context(transformers_standin())
        stack.enter_context(triton_standin())  # GPU compiler: imported at module level from v0.5.18
        finder = stack.enter_context(loader.installed(root, real, fakes))
        yield ImportEnvironment(installed, finder)
