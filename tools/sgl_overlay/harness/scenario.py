"""Scenario files: GPU readings, model shape, server flags and what passes."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import tomllib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..errors import UsageError
from .case import Case
from .flag_renames import respell
from .model_shape import ModelKind, text_config
from .outcome import Outcome
from .readings import ReadingKind
from .scenario_tables import wrong_types

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
LOGGED_FIGURES = ("max_total_num_tokens", "max_running_requests", "max_mamba_cache_size")
# how a public log's figures compare with the harness's range from the log's own readings
# (docs/scenarios.md, "Public start-up logs"): "holds" (every logged figure within it) or "open" (not)
SOURCE_STATUSES = ("holds", "open")
ROUNDING_KEYS = ("pre_rounding_gib", "post_rounding_gib")


class ScenarioError(UsageError):
    """A scenario file is missing or malformed (usage error, exit 2)."""


class RemedyExpect(StrEnum):
    """[expect] remedy: what a stated remedy must do for the run to pass."""

    WORKS = "works"  # a refusal (or over-budget start) passes only with a verified remedy
    WORKS_IF_STATED = "works-if-stated"  # a refusal stating no value passes, one stating a value only if it works


def _one_of(enum, value, path: Path, what: str):
    """``enum(value)``, or a ScenarioError naming the file, the key and the values allowed."""
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(f'"{m}"' for m in enum)
        raise ScenarioError(f"{path}: {what} is {value!r}, not one of {allowed}") from None


@dataclass
class Expect:
    passing: list[Outcome]
    remedy: RemedyExpect | None = None
    message: str | None = None  # regex a refusal's message must match
    figures: dict = field(default_factory=dict)  # exact figures an ok run must show (judged)
    # the memory ledger's case (fits / over_budget / cannot_run), checked where the tree writes a ledger
    case: Case | None = None
    # figures a public start-up log printed (public-*.toml): tests/regress/test_public_logs.py
    logged: dict = field(default_factory=dict)


@dataclass
class Scenario:
    name: str
    description: str
    gpu: dict
    model: dict
    server: dict
    draft: dict | None
    expect: Expect
    path: Path
    # where a scenario's figures come from (public-*.toml): url, release, hf_id, status ...
    source: dict | None = None

    @property
    def reading_kind(self) -> ReadingKind:
        """What the [gpu] readings are (``[gpu] readings``; default ``sizing``, what they were before the key)."""
        return ReadingKind(self.gpu.get("readings") or ReadingKind.SIZING)

    def respelled(self) -> Scenario:
        """This scenario with its renamed [server] keys in their new spelling (``flag_renames``), as a
        release that refuses the old flags (v0.5.23) must be given it."""
        return dataclasses.replace(self, server=respell(self.server))

    def to_request(self, overrides: dict | None = None) -> dict:
        """The plain-data form sent to the child interpreter."""
        server = copy.deepcopy(self.server)
        server.update(overrides or {})
        return {
            "name": self.name,
            "gpu": self.gpu,
            "model": self.model,
            "server": server,
            "draft": self.draft,
        }


def names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def load(name_or_path: str) -> Scenario:
    path = Path(name_or_path)
    if not path.suffix == ".toml":
        path = SCENARIO_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        close = difflib.get_close_matches(name_or_path, names(), n=3, cutoff=0.6)
        raise ScenarioError(
            f"unknown scenario {name_or_path!r}: no {path}"
            + (f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(names())}"),
            hint="`python tools/regress.py --list` names each shipped scenario with what it is; "
                 "--scenario also takes the path of a .toml file"
        )
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{path}: not valid TOML ({e}); fix the file") from e
    for section in ("gpu", "model", "server", "expect"):
        if not isinstance(data.get(section), dict):
            raise ScenarioError(f"{path}: missing [{section}] table; see docs/scenarios.md")
    wrong = wrong_types(data)
    if wrong:
        raise ScenarioError(f"{path}: " + "; ".join(w.message() for w in wrong),
                            hint="fix the value in the file (the type each key takes: docs/scenarios.md, "
                                 "\"Tables and keys\")")
    for key in ("pre_load_free_gib", "post_load_free_gib"):
        if key not in data["gpu"]:
            raise ScenarioError(f"{path}: [gpu] needs {key} (GiB free; see docs/scenarios.md)")
    _check_readings(path, data["gpu"], data["model"])
    exp = data["expect"]
    passing = exp.get("pass")
    if not passing or not isinstance(passing, list):
        raise ScenarioError(f"{path}: [expect] pass must list outcomes among {', '.join(Outcome)}, "
                            f"e.g. pass = [\"ok\"]")
    passing = [_one_of(Outcome, o, path, "an [expect] pass outcome") for o in passing]
    remedy = None if exp.get("remedy") is None else _one_of(RemedyExpect, exp["remedy"], path,
                                                            "[expect] remedy (or leave it out)")
    case = None if exp.get("case") is None else _one_of(Case, exp["case"], path, "[expect] case")
    # [draft] weights_gib: the drafter's footprint on one GPU at the sizing's free-memory reading,
    # its weights and what its start allocates after them before that reading (the key keeps its
    # name); releases that start the drafter first take it out of the reading (draft_reading.py)
    w = (data.get("draft") or {}).get("weights_gib")
    if w is not None and w <= 0:
        raise ScenarioError(f"{path}: [draft] weights_gib must be a positive number of GiB "
                            f"(the drafter's footprint on one GPU: its weights and what its start "
                            f"allocates after them), not {w!r}")
    source = data.get("source")
    logged = exp.get("logged", {})
    _check_source(path, source, logged)
    if source is not None and data["gpu"].get("readings") != ReadingKind.LOGGED:
        raise ScenarioError(f"{path}: a [source] scenario gives a log's readings: [gpu] readings = \"logged\"")
    return Scenario(
        name=data.get("name", path.stem),
        description=data.get("description", ""),
        gpu=data["gpu"],
        model=data["model"],
        server=data["server"],
        draft=data.get("draft"),
        expect=Expect(
            passing=passing,
            remedy=remedy,
            message=exp.get("message"),
            figures=exp.get("figures", {}),
            case=case,
            logged=logged,
        ),
        path=path,
        source=source,
    )


def _check_readings(path: Path, gpu: dict, model: dict) -> None:
    """[gpu] readings (the kind), the readings' rounding and ``integrated``; logged readings need what the
    RoPE pre-expansion reads (docs/scenarios.md, "The readings")."""
    kind = _one_of(ReadingKind, gpu.get("readings") or ReadingKind.SIZING, path, "[gpu] readings")
    for key in ROUNDING_KEYS:
        if gpu.get(key, 0) < 0:
            raise ScenarioError(f"{path}: [gpu] {key} must not be negative (a half-width in GiB), not {gpu[key]!r}")
    if kind is ReadingKind.LOGGED:
        text = text_config(model)
        missing = [k for k in ("max_position_embeddings", "head_dim") if k not in text]
        if missing:
            table = ModelKind.of(model).text_table
            raise ScenarioError(f"{path}: readings = \"logged\" derives the RoPE pre-expansion after \"Load weight "
                                f"end\", which needs {table} {', '.join(missing)} (the published config.json's)")


def _check_source(path: Path, source: dict | None, logged: dict) -> None:
    """A [source] table (a public log) needs its address, the release it runs on and
    a status; [expect.logged] holds only figures the harness reports."""
    unknown = sorted(set(logged) - set(LOGGED_FIGURES))
    if unknown:
        raise ScenarioError(f"{path}: [expect.logged] has {', '.join(unknown)}; "
                            f"known: {', '.join(LOGGED_FIGURES)}")
    if source is None:
        if logged:
            raise ScenarioError(f"{path}: [expect.logged] needs a [source] table saying where the log is")
        return
    for key in ("url", "release", "status"):
        if not isinstance(source.get(key), str) or not source[key]:
            raise ScenarioError(f"{path}: [source] needs {key} (a string); see docs/scenarios.md")
    if not source["url"].startswith("https://"):
        raise ScenarioError(f"{path}: [source] url must be an https address, not {source['url']!r}")
    if source["status"] not in SOURCE_STATUSES:
        raise ScenarioError(f"{path}: [source] status must be one of {', '.join(SOURCE_STATUSES)}")
    if source["status"] == "open" and not source.get("reason"):
        raise ScenarioError(f"{path}: [source] status \"open\" needs a reason (why the log's figures lie outside "
                            "the harness's range)")
    if not logged:
        raise ScenarioError(f"{path}: a [source] scenario needs [expect.logged] figures")
    moved = [k for k in ROUNDING_KEYS if k in source]
    if moved:
        raise ScenarioError(f"{path}: [source] {', '.join(moved)} now belong in [gpu] (the readings' rounding, "
                            "read by every run); see docs/scenarios.md")
    if not isinstance(source.get("witness_post_load_free_gib"), (int, float)):
        raise ScenarioError(f"{path}: [source] needs witness_post_load_free_gib (the post-load reading "
                            "at which the release gives every logged figure); see docs/scenarios.md")
