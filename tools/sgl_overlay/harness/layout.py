"""Find the SGLang source in a path and tell which sizing-code layout it has."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError


class NoSource(UsageError):
    """No SGLang source under the given path (usage error, exit 2)."""


@dataclass(frozen=True)
class Layout:
    era: str  # "runner" | "mixin" | "mixin-bytes" | "configurator"
    entry: str  # module that holds the entry point
    real: tuple[str, ...]  # modules executed from the tree for the sizing


# Newest first: the first whose marker file exists decides.
ERAS = (
    Layout(
        "configurator",
        "sglang.srt.mem_cache.kv_cache_configurator",
        ("sglang.srt.mem_cache.kv_cache_configurator", "sglang.srt.model_executor.pool_configurator"),
    ),
    Layout(
        "mixin-bytes",
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        ("sglang.srt.model_executor.model_runner_kv_cache_mixin", "sglang.srt.model_executor.pool_configurator"),
    ),
    Layout(
        "mixin",
        "sglang.srt.model_executor.model_runner_kv_cache_mixin",
        ("sglang.srt.model_executor.model_runner_kv_cache_mixin",),
    ),
    Layout("runner", "sglang.srt.model_executor.model_runner", ("sglang.srt.model_executor.model_runner",)),
)

_MARKERS = {
    "configurator": "sglang/srt/mem_cache/kv_cache_configurator.py",
    "mixin-bytes": "sglang/srt/model_executor/pool_configurator.py",
    "mixin": "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
    "runner": "sglang/srt/model_executor/model_runner.py",
}


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
        marker = root / _MARKERS[layout.era]
        if marker.is_file():
            if layout.era == "mixin-bytes" and not (root / _MARKERS["mixin"]).is_file():
                continue
            return layout
    raise NoSource(f"{root}/sglang/srt has none of {', '.join(_MARKERS.values())}")


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
