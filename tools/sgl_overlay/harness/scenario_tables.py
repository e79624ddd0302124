"""A scenario file's tables (docs/scenarios.md, "Tables and keys"), typed: each table is a class that
declares its keys, the type each value must have (``Want``) and what a run reads when the key is not
given, and checks the values in its constructor.  A value of the wrong type (``total_mib = "97887"``,
``num_hidden_layers = "sixty-four"``) is bad input (exit 2) naming the file, the table, the key and the
type wanted, not a figure computed from a string or a TypeError deep in the release's code (exit 125).

A table is the file's own mapping (a ``dict``: keys it does not declare are passed on as given,
``[server]`` keys to the release's own ``ServerArgs``, other keys of ``[model.text_config]`` to the
release's config class) with its declared keys read through typed attributes
(``GpuTable(...).post_load_free_gib``).  The child reads the request's tables through the same classes,
so a key is declared, typed and defaulted once: adding one touches its table, its reader and the docs.
A ``None`` value is a key not given (the planner's request states an unknown device so).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import ClassVar

from .readings import ReadingKind


class Want(Enum):
    """A type a key's value must have, with its words for a message and an example value."""

    INT = ("an integer", "64")
    NUMBER = ("a number", "0.85")
    STRING = ("a string", '"bfloat16"')
    BOOL = ("true or false", "true")
    INTS = ("a list of integers", "[9, 0]")
    NUMBERS = ("a list of numbers", "[23.0, 22.4]")
    STRINGS = ("a list of strings", '["LlamaForCausalLM"]')

    def __init__(self, words: str, example: str):
        self.words, self.example = words, example

    def holds(self, value) -> bool:
        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        def is_number(v):
            return is_int(v) or isinstance(v, float)

        if self is Want.INT:
            return is_int(value)
        if self is Want.NUMBER:
            return is_number(value)
        if self is Want.STRING:
            return isinstance(value, str)
        if self is Want.BOOL:
            return isinstance(value, bool)
        if self is Want.INTS:
            return isinstance(value, list) and all(is_int(v) for v in value)
        if self is Want.NUMBERS:
            return isinstance(value, list) and all(is_number(v) for v in value)
        return isinstance(value, list) and all(isinstance(v, str) for v in value)


@dataclass(frozen=True)
class WrongType:
    """A value of a type its key does not take."""

    table: str
    key: str
    value: object
    want: Want

    def message(self) -> str:
        where = f"[{self.table}] {self.key}" if self.table else self.key
        return f"{where} must be {self.want.words}, not {self.value!r} ({_kind(self.value)}); {self.fix()}"

    def fix(self) -> str:
        """The line to write: the value without its quotes where it reads as the type wanted, else an example."""
        if isinstance(self.value, str) and self.want in (Want.INT, Want.NUMBER):
            for conv in ((int,) if self.want is Want.INT else (int, float)):
                try:
                    return f"write {self.key} = {conv(self.value)} (without quotes)"
                except ValueError:
                    pass
        return f"write it as {self.want.words}, e.g. {self.key} = {self.want.example}"


def _kind(value) -> str:
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table"}.get(type(value), type(value).__name__)


class TableError(ValueError):
    """A table's values do not make a table (the message names the table and the key, not the file)."""


class WrongTypes(TableError):
    """Values of the wrong type in a table (``wrong``, each with its key and the type wanted)."""

    def __init__(self, wrong: list[WrongType]):
        super().__init__("; ".join(w.message() for w in wrong))
        self.wrong = wrong


class Key:
    """A declared key of a table: the type its value must have, and what reading it gives where the
    table does not give it (``default``), converted by ``read`` (e.g. a string to its enum)."""

    def __init__(self, want: Want, default=None, read=None, name: str | None = None):
        self.want, self.default, self.read, self.name = want, default, read, name

    def __set_name__(self, owner, name: str) -> None:
        self.name = self.name or name  # a key that is no Python name (``pass``) gives its own

    def __get__(self, table, owner=None):
        if table is None:
            return self
        value = table.get(self.name)
        if value is None:
            return self.default
        return self.read(value) if self.read is not None else value


class Table(dict):
    """A scenario table: the file's mapping, its declared keys (``Key`` attributes) checked."""

    NAME: ClassVar[str] = ""  # as the file writes it: "gpu", "model.text_config"; "" for the top level
    NESTED: ClassVar[dict[str, type[Table]]] = {}  # sub-tables by key

    def __init__(self, values: Mapping = (), /):
        super().__init__(values)
        wrong = self.wrong_types_of(self)
        if wrong:
            raise WrongTypes(wrong)
        for key, cls in self.NESTED.items():
            if isinstance(self.get(key), Mapping):
                self[key] = cls(self[key])

    @classmethod
    def keys_declared(cls) -> dict[str, Key]:
        """name -> Key, in declaration order."""
        out = {}
        for klass in reversed(cls.__mro__):
            out.update({v.name: v for v in vars(klass).values() if isinstance(v, Key)})
        return out

    @classmethod
    def wrong_types_of(cls, values: Mapping) -> list[WrongType]:
        """Every declared key of ``values`` (and of its sub-tables) whose value is not of its type, in
        declaration order."""
        out = [WrongType(cls.NAME, name, values[name], key.want) for name, key in cls.keys_declared().items()
               if values.get(name) is not None and not key.want.holds(values[name])]
        for key, sub in cls.NESTED.items():
            if isinstance(values.get(key), Mapping):
                out += sub.wrong_types_of(values[key])
        return out


def one_of(enum, value, what: str):
    """``enum(value)``, or a TableError naming ``what`` (``[gpu] readings``) and the values allowed."""
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(f'"{m}"' for m in enum)
        raise TableError(f"{what} is {value!r}, not one of {allowed}") from None


class FileTop(Table):
    """The file's top level."""

    NAME = ""
    name = Key(Want.STRING)
    description = Key(Want.STRING, default="")


class GpuTable(Table):
    """``[gpu]``: the two free-memory readings, their kind and rounding, and the device the release's flag
    rules probe (docs/scenarios.md)."""

    NAME = "gpu"
    pre_load_free_gib = Key(Want.NUMBER)  # required
    post_load_free_gib = Key(Want.NUMBER)  # required
    readings = Key(Want.STRING, default=ReadingKind.SIZING, read=ReadingKind)
    pre_rounding_gib = Key(Want.NUMBER)  # default: the kind's (ReadingKind.default_rounding_gib)
    post_rounding_gib = Key(Want.NUMBER)
    integrated = Key(Want.BOOL, default=False)
    device_name = Key(Want.STRING)
    capability = Key(Want.INTS)
    total_mib = Key(Want.INT)
    weights_gib = Key(Want.NUMBER)
    world_size = Key(Want.INT)  # default: tp_size
    gpu_count = Key(Want.INT)  # default: the world size
    cuda = Key(Want.STRING, default="12.9")
    post_load_free_gib_per_rank = Key(Want.NUMBERS)  # default: every rank alike

    REQUIRED: ClassVar[tuple[str, ...]] = ("pre_load_free_gib", "post_load_free_gib")
    ROUNDING: ClassVar[tuple[str, ...]] = ("pre_rounding_gib", "post_rounding_gib")

    def __init__(self, values: Mapping = (), /):
        super().__init__(values)
        for key in self.REQUIRED:
            if key not in self:
                raise TableError(f"[gpu] needs {key} (GiB free; see docs/scenarios.md)")
        one_of(ReadingKind, self.get("readings") or ReadingKind.SIZING, "[gpu] readings")
        for key in self.ROUNDING:
            if self.get(key, 0) < 0:
                raise TableError(f"[gpu] {key} must not be negative (a half-width in GiB), not {self[key]!r}")

    @property
    def rounding_gib(self) -> tuple[float, float]:
        """Each reading's half-width (GiB): as given, else the readings kind's default."""
        default = self.readings.default_rounding_gib
        return tuple(default if r is None else float(r) for r in (self.pre_rounding_gib, self.post_rounding_gib))


class DraftTable(Table):
    """``[draft]``: the drafter's shape and its footprint at the sizing's reading; the planner adds the
    drafter's ``path`` and its whole ``hf_config`` (passed on as given)."""

    NAME = "draft"
    num_hidden_layers = Key(Want.INT)
    block_size = Key(Want.INT)
    num_key_value_heads = Key(Want.INT)
    head_dim = Key(Want.INT)
    # the drafter's footprint on one GPU at the sizing's free-memory reading: its weights and what its
    # start allocates after them (the key keeps its name); releases that start the drafter first take it
    # out of the reading (draft_reading.py)
    weights_gib = Key(Want.NUMBER)

    def __init__(self, values: Mapping = (), /):
        super().__init__(values)
        w = self.weights_gib
        if w is not None and w <= 0:
            raise TableError(f"[draft] weights_gib must be a positive number of GiB "
                             f"(the drafter's footprint on one GPU: its weights and what its start "
                             f"allocates after them), not {w!r}")


class LoggedFigures(Table):
    """``[expect.logged]``: the figures a public start-up log printed."""

    NAME = "expect.logged"
    max_total_num_tokens = Key(Want.INT)
    max_running_requests = Key(Want.INT)
    max_mamba_cache_size = Key(Want.INT)


class ExpectTable(Table):
    """``[expect]``: what passes (the outcomes, the refusal's message and remedy, the ledger's case, the
    figures)."""

    NAME = "expect"
    passing = Key(Want.STRINGS, name="pass")
    message = Key(Want.STRING)
    remedy = Key(Want.STRING)
    case = Key(Want.STRING)
    NESTED = {"logged": LoggedFigures}

    @classmethod
    def wrong_types_of(cls, values: Mapping) -> list[WrongType]:
        """And every ``figures`` value that is not an integer (the figures are counts)."""
        out = super().wrong_types_of(values)
        figures = values.get("figures")
        for key, value in figures.items() if isinstance(figures, Mapping) else ():
            if not Want.INT.holds(value):
                out.append(WrongType("expect.figures", key, value, Want.INT))
        return out


class SourceStatus(StrEnum):
    """How a public log's figures compare with the harness's range from the log's own readings
    (docs/scenarios.md, "Public start-up logs")."""

    HOLDS = "holds"  # every logged figure within it
    OPEN = "open"  # not (its reason says why)


class SourceTable(Table):
    """``[source]``: where a public-log scenario's figures come from."""

    NAME = "source"
    url = Key(Want.STRING)
    release = Key(Want.STRING)
    status = Key(Want.STRING, read=SourceStatus)
    reason = Key(Want.STRING)
    hf_id = Key(Want.STRING)
    command_url = Key(Want.STRING)
    weights_logged_gib = Key(Want.NUMBER)
    safetensors_total_size = Key(Want.INT)
    # the post-load reading at which the release gives every logged figure
    witness_post_load_free_gib = Key(Want.NUMBER)

    def __init__(self, values: Mapping = (), /):
        super().__init__(values)
        for key in ("url", "release", "status"):
            if not isinstance(self.get(key), str) or not self[key]:
                raise TableError(f"[source] needs {key} (a string); see docs/scenarios.md")
        if not self.url.startswith("https://"):
            raise TableError(f"[source] url must be an https address, not {self.url!r}")
        if self["status"] not in tuple(SourceStatus):
            raise TableError(f"[source] status must be one of {', '.join(SourceStatus)}")
        if self.status is SourceStatus.OPEN and not self.reason:
            raise TableError("[source] status \"open\" needs a reason (why the log's figures lie outside "
                             "the harness's range)")
        moved = [k for k in GpuTable.ROUNDING if k in self]
        if moved:
            raise TableError(f"[source] {', '.join(moved)} now belong in [gpu] (the readings' rounding, "
                             "read by every run); see docs/scenarios.md")
        if not isinstance(self.get("witness_post_load_free_gib"), (int, float)):
            raise TableError("[source] needs witness_post_load_free_gib (the post-load reading "
                             "at which the release gives every logged figure); see docs/scenarios.md")
