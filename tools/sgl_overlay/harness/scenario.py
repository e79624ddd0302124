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
from .model_shape import ModelShape
from .outcome import Outcome
from .readings import ReadingKind
from .scenario_tables import (DraftTable, ExpectTable, FileTop, GpuTable, SourceTable, TableError, WrongType,
                              WrongTypes, one_of)

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
LOGGED_FIGURES = ("max_total_num_tokens", "max_running_requests", "max_mamba_cache_size")
# the file's tables, in the order their values' types are checked ("" the file's top level)
TABLES = (("", FileTop), ("gpu", GpuTable), ("model", ModelShape), ("draft", DraftTable), ("expect", ExpectTable),
          ("source", SourceTable))


class ScenarioError(UsageError):
    """A scenario file is missing or malformed (usage error, exit 2)."""


class RemedyExpect(StrEnum):
    """[expect] remedy: what a stated remedy must do for the run to pass."""

    WORKS = "works"  # a refusal (or over-budget start) passes only with a verified remedy
    WORKS_IF_STATED = "works-if-stated"  # a refusal stating no value passes, one stating a value only if it works


def _one_of(enum, value, path: Path, what: str):
    """``enum(value)``, or a ScenarioError naming the file, the key and the values allowed."""
    try:
        return one_of(enum, value, what)
    except TableError as e:
        raise ScenarioError(f"{path}: {e}") from None


def wrong_types(data: dict) -> list[WrongType]:
    """Every declared key of the parsed file whose value is not of its type, table by table (``TABLES``)."""
    out = []
    for key, table in TABLES:
        values = data.get(key) if key else data
        if isinstance(values, dict):
            out += table.wrong_types_of(values)
    return out


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
    """A scenario file, its tables typed (``scenario_tables``, ``model_shape``); a table given as a plain
    dict (``dataclasses.replace(sc, gpu={...})``) is read into its type, and checked, here."""

    name: str
    description: str
    gpu: GpuTable
    model: ModelShape
    server: dict
    draft: DraftTable | None
    expect: Expect
    path: Path
    # where a scenario's figures come from (public-*.toml): url, release, hf_id, status ...
    source: SourceTable | None = None

    def __post_init__(self):
        self.gpu, self.model = _typed(GpuTable, self.gpu), _typed(ModelShape, self.model)
        self.draft = None if self.draft is None else _typed(DraftTable, self.draft)
        self.source = None if self.source is None else _typed(SourceTable, self.source)

    @property
    def reading_kind(self) -> ReadingKind:
        """What the [gpu] readings are (``[gpu] readings``; default ``sizing``, what they were before the key)."""
        return self.gpu.readings

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


def _typed(table, values):
    return values if isinstance(values, table) else table(values)


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
        raise ScenarioError(f"{path}: {WrongTypes(wrong)}",
                            hint="fix the value in the file (the type each key takes: docs/scenarios.md, "
                                 "\"Tables and keys\")")
    try:
        gpu, model = GpuTable(data["gpu"]), ModelShape(data["model"])
        _check_readings(gpu, model)
        draft = None if data.get("draft") is None else DraftTable(data["draft"])
        source = None if data.get("source") is None else SourceTable(data["source"])
    except TableError as e:
        raise ScenarioError(f"{path}: {e}") from None
    exp = data["expect"]
    passing = exp.get("pass")
    if not passing or not isinstance(passing, list):
        raise ScenarioError(f"{path}: [expect] pass must list outcomes among {', '.join(Outcome)}, "
                            f"e.g. pass = [\"ok\"]")
    passing = [_one_of(Outcome, o, path, "an [expect] pass outcome") for o in passing]
    remedy = None if exp.get("remedy") is None else _one_of(RemedyExpect, exp["remedy"], path,
                                                            "[expect] remedy (or leave it out)")
    case = None if exp.get("case") is None else _one_of(Case, exp["case"], path, "[expect] case")
    logged = exp.get("logged", {})
    _check_logged(path, source, logged)
    if source is not None and gpu.readings is not ReadingKind.LOGGED:
        raise ScenarioError(f"{path}: a [source] scenario gives a log's readings: [gpu] readings = \"logged\"")
    return Scenario(
        name=data.get("name", path.stem),
        description=data.get("description", ""),
        gpu=gpu,
        model=model,
        server=data["server"],
        draft=draft,
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


def _check_readings(gpu: GpuTable, model: ModelShape) -> None:
    """Logged readings need what the RoPE pre-expansion reads (docs/scenarios.md, "The readings")."""
    if gpu.readings is ReadingKind.LOGGED:
        missing = [k for k in ("max_position_embeddings", "head_dim") if k not in model.text]
        if missing:
            raise TableError(f"readings = \"logged\" derives the RoPE pre-expansion after \"Load weight "
                             f"end\", which needs {model.kind.text_table} {', '.join(missing)} (the published "
                             f"config.json's)")


def _check_logged(path: Path, source: SourceTable | None, logged: dict) -> None:
    """[expect.logged] holds only figures the harness reports, and only in a [source] scenario (a public
    log), which needs them."""
    unknown = sorted(set(logged) - set(LOGGED_FIGURES))
    if unknown:
        raise ScenarioError(f"{path}: [expect.logged] has {', '.join(unknown)}; "
                            f"known: {', '.join(LOGGED_FIGURES)}")
    if source is None:
        if logged:
            raise ScenarioError(f"{path}: [expect.logged] needs a [source] table saying where the log is")
        return
    if not logged:
        raise ScenarioError(f"{path}: a [source] scenario needs [expect.logged] figures")
