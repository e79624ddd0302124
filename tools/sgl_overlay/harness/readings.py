"""The sizing's own free-memory readings, modelled from what a scenario or a plan gives (pure).

SGLang's KV-cache sizing reads free GPU memory twice: ``pre_model_load_memory`` at the end of
``init_torch_distributed`` (the minimum over the ranks) and again inside its profiling step
(``_profile_available_bytes``; the memory patches' ``free_memory_per_rank``).  A start-up log prints
two other readings, with two decimals of GiB: "Load weight begin. avail mem=X GB" and "Load weight
end. ... avail mem=Y GB" (``load_model``).  A scenario's (or a plan's) readings are one of two kinds
(``ReadingKind``):

* ``sizing`` (the default, what every scenario gave before the kind existed): the sizing's own two
  readings, used as given; exact when they are a probe's bytes, give ``*_rounding_gib`` otherwise;
* ``logged``: the log's two lines, as printed (``*_rounding_gib`` defaults to 0.005 GiB, a ``%.2f``
  value; 0.01 where a reading is the sum of two).

For ``logged`` readings ``derive`` adds what the release's code does between the log's readings and
the sizing's (docs/results/regress.md, "What the releases' code runs between the readings"; the facts
come from the tree: ``release_window``), each a ``Term`` with its span and its source:

* between the sizing's pre reading and "Load weight begin": the process's first
  ``torch.cuda.Stream()`` (the runner's forward stream), which makes PyTorch create its whole stream
  pool outside the caching allocator.  At TP > 1 PyNCCL's communicator created it before the pre
  reading, so it costs nothing there.  What the pool costs is the driver's: measured on the H200
  (``STREAM_POOL_MEASURED``), elsewhere the span ``STREAM_POOL_UNMEASURED``;
* between "Load weight end" and the sizing's reading: the RoPE pre-expansion
  (``rope_reserve``, from the model's config, the context length and the tree's constants);
* the rounding of each logged value.

From v0.5.14 the drafter's start also comes between "Load weight end" and the sizing's reading; it is
the scenario's ``[draft] weights_gib`` and applies to both kinds (``draft_reading``).

The result (``SizingReadings``) spans what the sizing can have read; ``at(0)`` (``End.PESSIMISTIC``) is
the smallest budget (post - pre x (1 - mem_fraction_static)): the highest pre reading and the lowest
post one, ``at(1)`` the largest, the budget linear in between.  Exact readings (no term with a width)
give one run.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

GIB = 1 << 30
MIB = 1 << 20


class ReadingKind(StrEnum):
    """What a scenario's ``[gpu] pre_load_free_gib`` / ``post_load_free_gib`` are."""

    SIZING = "sizing"   # the sizing's own readings (pre_model_load_memory, the profiling step's): used as given
    LOGGED = "logged"   # the log's "Load weight begin" / "Load weight end ... avail mem": the sizing's are derived

    @property
    def default_rounding_gib(self) -> float:
        """A logged value is printed with ``%.2f`` (GiB): within half a hundredth."""
        return 0.005 if self is ReadingKind.LOGGED else 0.0


class End(StrEnum):
    """The two ends of the span; a run takes a position between them (``SizingReadings.at``)."""

    PESSIMISTIC = "pessimistic"   # the smallest budget: the highest pre reading, the lowest post reading
    OPTIMISTIC = "optimistic"     # the largest budget

    @property
    def position(self) -> float:
        return 0.0 if self is End.PESSIMISTIC else 1.0


class Reading(StrEnum):
    PRE = "pre"     # the sizing's pre-load reading
    POST = "post"   # the sizing's post-load reading


class InWindow(StrEnum):
    """Whether the release's code creates the process's first CUDA stream between the sizing's
    pre-load reading and "Load weight begin", for a start at this TP (``release_window``)."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"   # the tree's code does not show it (a layout the reader does not know)


@dataclass(frozen=True)
class PoolCost:
    """Device memory PyTorch's stream pool takes outside the caching allocator, bytes (lo, hi)."""

    lo: int
    hi: int
    measured: bool
    source: str

    def words(self) -> str:
        if self.lo == self.hi:
            return f"{self.lo:,} B ({self.lo / MIB:g} MiB), measured"
        return f"not measured on this GPU: {self.lo / MIB:g}-{self.hi / MIB:g} MiB"


# The one measurement: tools/gpu/pre_gap_check.py on the H200 (driver 580.159.04, torch 2.11.0+cu130), the
# first torch.cuda.Stream() alone, in both orders against the first matmul (tests/data/gpu_results/2026-12-02/
# pre_gap_check.json), and the same gap in every target start of v0.5.12.post1, v0.5.13.post1, v0.5.14 and
# v0.5.16 recorded on that GPU (tests/data/gpu_results/2026-12-01/free_readings.json, 2026-12-02/r13, r14, r16).
H200_POOL_BYTES = 73_400_320
STREAM_POOL_MEASURED = {
    "NVIDIA H200": PoolCost(H200_POOL_BYTES, H200_POOL_BYTES, True,
                            "measured on an H200: tools/gpu/pre_gap_check.py (2026-12-02) and every recorded target "
                            "start there"),
}
# Elsewhere no figure is known: CUDA documents none, and no public measurement of a stream's device memory
# was found (docs/results/regress.md, "The readings a log does not show").  The span runs from nothing (a
# driver that takes no device memory for the pool: the figure the harness used before) to twice the one
# measurement (an allowance for another GPU, driver and torch, stated as such: not a measurement).
STREAM_POOL_UNMEASURED = PoolCost(0, 2 * H200_POOL_BYTES, False,
                                  "not measured on this GPU: from none to twice the H200's measured pool "
                                  "(an allowance, not a measurement)")


def stream_pool_cost(device_name: str | None) -> PoolCost:
    """The pool's cost on the device ``torch.cuda.get_device_name`` names."""
    return STREAM_POOL_MEASURED.get(device_name or "", STREAM_POOL_UNMEASURED)


@dataclass(frozen=True)
class Term:
    """Bytes the sizing's reading lies above the given one (negative: below), ``lo``..``hi``."""

    reading: Reading
    name: str
    lo: int
    hi: int
    source: str

    @property
    def exact(self) -> bool:
        return self.lo == self.hi

    def words(self) -> str:
        span = (f"{self.lo / MIB:+g} MiB" if self.exact else f"{self.lo / MIB:+g} to {self.hi / MIB:+g} MiB")
        return f"{self.reading} {self.name} {span} ({self.source})"

    def to_json(self) -> dict:
        return {"reading": self.reading, "name": self.name, "lo_bytes": self.lo, "hi_bytes": self.hi,
                "source": self.source}

    @classmethod
    def from_json(cls, d: dict) -> Term:
        return cls(Reading(d["reading"]), d["name"], int(d["lo_bytes"]), int(d["hi_bytes"]), d["source"])


@dataclass(frozen=True)
class Window:
    """What the release's code does between the log's readings and the sizing's, for one start:
    whether the stream pool is created between the pre reading and "Load weight begin" (and where
    that was read), and the RoPE pre-expansion's bytes (lo, hi) after "Load weight end"."""

    stream_pool: InWindow
    stream_pool_where: str
    rope_lo: int
    rope_hi: int
    rope_where: str


@dataclass(frozen=True)
class SizingReadings:
    """The span of the sizing's two readings (GiB), from the given ones and the terms."""

    kind: ReadingKind
    given_pre_gib: float
    given_post_gib: float
    terms: tuple[Term, ...]
    bounded: bool = True          # False: the readings move with things the code does not show (notes)
    notes: tuple[str, ...] = ()

    def _span(self, reading: Reading, given: float) -> tuple[float, float]:
        ts = [t for t in self.terms if t.reading is reading]
        if not ts:
            return given, given
        return (given + sum(t.lo for t in ts) / GIB, given + sum(t.hi for t in ts) / GIB)

    @property
    def pre(self) -> tuple[float, float]:
        return self._span(Reading.PRE, self.given_pre_gib)

    @property
    def post(self) -> tuple[float, float]:
        return self._span(Reading.POST, self.given_post_gib)

    @property
    def exact(self) -> bool:
        return all(t.exact for t in self.terms)

    def at(self, position: float) -> tuple[float, float]:
        """(pre, post) GiB the sizing reads at ``position`` along the span: 0 the pessimistic end (the
        highest pre reading, the lowest post one: the smallest budget for any mem_fraction_static), 1 the
        optimistic end; the budget grows linearly between them."""
        if not 0.0 <= position <= 1.0:
            raise ValueError(f"a position along the span is within [0, 1], not {position!r}")
        (pre_lo, pre_hi), (post_lo, post_hi) = self.pre, self.post
        if position == 0.0:
            return pre_hi, post_lo
        if position == 1.0:
            return pre_lo, post_hi
        return pre_hi + position * (pre_lo - pre_hi), post_lo + position * (post_hi - post_lo)

    def width_words(self) -> str:
        """The terms that give the span its width, in words."""
        wide = [t for t in self.terms if not t.exact]
        return "; ".join(t.words() for t in wide) if wide else "exact"

    @classmethod
    def from_json(cls, d: dict) -> SizingReadings:
        """The readings from their JSON form (``to_json``; a child's result carries it)."""
        return cls(ReadingKind(d["kind"]), float(d["given_pre_gib"]), float(d["given_post_gib"]),
                   tuple(Term.from_json(t) for t in d["terms"]), bool(d.get("bounded", True)),
                   tuple(d.get("notes") or ()))

    def to_json(self) -> dict:
        return {"kind": self.kind, "given_pre_gib": self.given_pre_gib, "given_post_gib": self.given_post_gib,
                "pre_gib": list(self.pre), "post_gib": list(self.post), "exact": self.exact,
                "bounded": self.bounded, "terms": [t.to_json() for t in self.terms], "notes": list(self.notes)}


def given_exactly(readings: dict | None) -> bool:
    """Whether a run's readings (their JSON, ``SizingReadings.to_json``) are the sizing's own, used as given
    (kind ``sizing``, exact): nothing between the given readings and the ones the sizing used."""
    return bool(readings) and ReadingKind(readings["kind"]) is ReadingKind.SIZING and bool(readings.get("exact"))


def _rounding_term(reading: Reading, gib: float, what: str) -> list[Term]:
    if not gib:
        return []
    b = round(gib * GIB)
    return [Term(reading, "rounding", -b, b, f"{what} given to +-{gib:g} GiB")]


def derive(kind: ReadingKind, pre_gib: float, post_gib: float, pre_rounding_gib: float,
           post_rounding_gib: float, *, device_name: str | None = None, tp: int = 1,
           window: Window | None = None, integrated: bool = False) -> SizingReadings:
    """The sizing's readings from the given ones.  ``window`` (the release's facts for this start,
    ``release_window``) is needed for ``logged`` readings; ``integrated``: the device shares the host's
    memory, whose readings (the host's available memory) move with what no release code shows."""
    terms = (_rounding_term(Reading.PRE, pre_rounding_gib, "the pre-load reading")
             + _rounding_term(Reading.POST, post_rounding_gib, "the post-load reading"))
    notes: list[str] = []
    if kind is ReadingKind.SIZING:
        return SizingReadings(kind, pre_gib, post_gib, tuple(terms))
    if window is None:
        raise ValueError("logged readings need the release's window (release_window.read)")
    pool = stream_pool_cost(device_name)
    if window.stream_pool is InWindow.YES:
        terms.append(Term(Reading.PRE, "stream pool", pool.lo, pool.hi,
                          f"the first torch.cuda.Stream() after the pre reading ({window.stream_pool_where}); "
                          f"{pool.words()}"))
    elif window.stream_pool is InWindow.UNKNOWN:
        terms.append(Term(Reading.PRE, "stream pool", 0, pool.hi,
                          f"where the first torch.cuda.Stream() comes is not shown by the tree's code "
                          f"({window.stream_pool_where}); {pool.words()}"))
    else:
        terms.append(Term(Reading.PRE, "stream pool", 0, 0,
                          f"created before the pre reading ({window.stream_pool_where})"))
    terms.append(Term(Reading.POST, "RoPE pre-expansion", -window.rope_hi, -window.rope_lo, window.rope_where))
    if tp > 1:
        notes.append(f"TP {tp}: the sizing takes the minimum over the ranks while the log prints rank 0's "
                     "readings; the ranks' spread is not modelled (not measured)")
    bounded = not integrated
    if integrated:
        notes.append("an integrated GPU: its free-memory readings are the host's available memory "
                     "(get_available_gpu_memory reads psutil), which the page cache and other processes move "
                     "between the readings; no code of the release bounds that")
    return SizingReadings(kind, pre_gib, post_gib, tuple(terms), bounded, tuple(notes))


def rounding_of(text: str) -> float:
    """Half a unit of the last decimal place a reading is written with ("94.24" -> 0.005, "94" -> 0.5):
    a value typed from a log, where it was printed rounded to that place."""
    t = text.strip()
    if not t or any(c in t for c in "eE"):
        return 0.0
    places = len(t.split(".", 1)[1]) if "." in t else 0
    return 0.5 * 10.0 ** -places
