"""Find the SGLang source in a path and tell which sizing-code layout it has."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..errors import UsageError


class NoSource(UsageError):
    """No SGLang source under the given path (usage error, exit 2)."""


class Driver(StrEnum):
    """The child's driver of an era's sizing code (``harness/child/drivers/<value>.py``, its ``drive``)."""

    CONFIGURATOR = "configurator"  # the release's KVCacheConfigurator
    RUNNER = "runner"  # a ModelRunner-like object and its real methods


class Era(StrEnum):
    """A sizing-code layout, newest first; the files that mark it and the driver that runs it."""

    CONFIGURATOR = "configurator"  # v0.5.16+: mem_cache/kv_cache_configurator.py
    MIXIN_BYTES = "mixin-bytes"  # the KV-cache mixin and model_executor/pool_configurator.py
    MIXIN = "mixin"  # model_executor/model_runner_kv_cache_mixin.py
    RUNNER = "runner"  # model_executor/model_runner.py alone

    @property
    def markers(self) -> tuple[str, ...]:
        """The files (under the source root) a tree of this era has, all of them."""
        return {
            Era.CONFIGURATOR: (_KV_CONFIGURATOR,),
            Era.MIXIN_BYTES: (_POOL_CONFIGURATOR, _MIXIN),
            Era.MIXIN: (_MIXIN,),
            Era.RUNNER: (_RUNNER,),
        }[self]

    @property
    def driver(self) -> Driver:
        return Driver.CONFIGURATOR if self is Era.CONFIGURATOR else Driver.RUNNER


_KV_CONFIGURATOR = "sglang/srt/mem_cache/kv_cache_configurator.py"
_POOL_CONFIGURATOR = "sglang/srt/model_executor/pool_configurator.py"
_MIXIN = "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"
_RUNNER = "sglang/srt/model_executor/model_runner.py"


@dataclass(frozen=True)
class Layout:
    era: Era
    entry: str  # module that holds the entry point
    real: tuple[str, ...]  # modules executed from the tree for the sizing


# Newest first: the first whose marker files exist decides.
ERAS = (
    Layout(
        Era.CONFIGURATOR,
        "sglang.srt.mem_cache.kv_cache_configurator",
        ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.model_executor.pool_configurator"),
    ),
    Layout(
        Era.MIXIN_BYTES,
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        ("sglang.srt.model_executor.model_runner_kv_cache_mixin", "sglang.srt.model_executor.pool_configurator"),
    ),
    Layout(
        Era.MIXIN,
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        ("sglang.srt.model_executor.model_runner_kv_cache_mixin",),
    ),
    Layout(Era.RUNNER, "sglang.srt.model_executor.model_runner", ("sglang.srt.model_executor.model_runner",)),
)


def source_root(path: str | Path) -> Path:
    """The directory that holds ``sglang/``: PATH itself, PATH/python, or PATH/sglang-*/."""
    path = Path(path).resolve()
    candidates = [path, path / "python"]
    candidates += sorted(p for p in path.glob("sglang-*") if p.is_dir()) if path.is_dir() else []
    if path.name == "sglang" and (path / "srt").is_dir():
        candidates.insert(0, path.parent)
    for c in candidates:
        if (c / "sglang" / "srt").is_dir():
            return c
    raise NoSource(
        f"no SGLang source under {path}: expected {path}/sglang/srt (unpacked wheel or sdist) "
        f"or {path}/python/sglang/srt (checkout or the tree tools/apply.py builds); "
        f"pass --tree with one of those"
    )


def detect(root: Path) -> Layout:
    for layout in ERAS:
        if all((root / m).is_file() for m in layout.era.markers):
            return layout
    raise NoSource(f"{root}/sglang/srt has none of "
                   f"{', '.join((_KV_CONFIGURATOR, _POOL_CONFIGURATOR, _MIXIN, _RUNNER))}")


def version_of(root: Path) -> str | None:
    """The version string a release artifact records (None for a plain checkout)."""
    import re

    for name in ("_version.py", "version.py"):
        v = root / "sglang" / name
        if v.is_file():
            m = re.search(r"^__version__\s*(?:=\s*version\s*)?=\s*['\"]([^'\"]+)['\"]", v.read_text(), re.M)
            if m:
                return m.group(1)
    return None
