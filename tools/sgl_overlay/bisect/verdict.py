"""What a bisection found, and its record.

``strategy.decide`` builds one ``Verdict`` (a frozen dataclass per kind of
answer, holding the points themselves); ``Record`` is that verdict with the
run that led to it (the results, ``--fixed``, the command that narrows a
release answer to commits).  Neither is changed once built: the JSON form
(``Record.to_json``: ``tools/bisect.py --json``, the log's verdict record)
and the words are derived from them, here and nowhere else."""
import abc
import dataclasses
import enum
from typing import ClassVar

from .range import Point, Range
from .terms import NEW, Term

OUTPUT_TAIL = 600                   # characters of a test's output the words quote
WHY_TAIL = 300                      # characters of a skipped point's output its record keeps


class Answer(enum.StrEnum):
    """The verdict's public name (the JSON ``verdict``, the exit code's cause)."""
    FIRST_BAD = "first-bad"
    FIRST_FIXED = "first-fixed"
    NOT_IN_RANGE = "not-in-range"
    CANNOT_REPRODUCE = "cannot-reproduce"
    INCONCLUSIVE = "inconclusive"
    FLAKY = "flaky"

    @property
    def found(self) -> bool:
        """Whether the answer names the first point of the new behaviour."""
        return self in (Answer.FIRST_BAD, Answer.FIRST_FIXED)


@dataclasses.dataclass(frozen=True)
class Said:
    """What the words need besides the verdict: the range's names for its
    points, the direction, and what the test said at each point."""
    rng: Range
    fixed: bool
    results: tuple

    def name(self, p: Point) -> str:
        return self.rng.name(p)

    def at(self, p: Point) -> str:
        runs = [r for r in self.results if r.point == p.id]
        return (runs[-1].summary or runs[-1].output.strip()[-OUTPUT_TAIL:]) if runs else ""

    @property
    def good(self):
        return "fails" if self.fixed else "passes"

    @property
    def bad(self):
        return "passes" if self.fixed else "fails"


class Verdict(abc.ABC):
    """One kind of answer; subclasses are frozen dataclasses of points."""

    non_monotonic: tuple = ()       # later points that behaved like the old end again
    ANSWER: ClassVar[Answer]        # the answer, where it does not depend on --fixed

    def answer(self, fixed: bool) -> Answer:
        return self.ANSWER

    def fields(self, said: Said) -> dict:
        """The JSON fields of this kind of answer: by default each of its
        dataclass fields in order, a point as its JSON form, a tuple as a list
        (``non_monotonic`` apart: ``to_json`` adds it)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name != "non_monotonic":
                out[f.name] = v.to_json() if isinstance(v, Point) else list(v) if isinstance(v, tuple) else v
        return out

    @abc.abstractmethod
    def lines(self, said: Said) -> list:
        """The answer in sentences, the first one the answer itself."""

    @property
    def found(self):
        """(last old point, first new point) of a found answer, else None."""
        return None

    def words(self, said: Said) -> list:
        out = self.lines(said)
        if self.non_monotonic:
            out.append("note: later point(s) behaved like the old end again: "
                       + ", ".join(said.name(p) for p in self.non_monotonic) + " (the property is not monotonic here)")
        return out

    def to_json(self, said: Said) -> dict:
        d = {"verdict": self.answer(said.fixed), **self.fields(said)}
        if self.non_monotonic:
            d["non_monotonic"] = [p.id for p in self.non_monotonic]
        return d


@dataclasses.dataclass(frozen=True)
class FirstNew(Verdict):
    """The first point of the new behaviour, right after the last old one."""
    last_old: Point
    first_new: Point
    non_monotonic: tuple = ()

    def answer(self, fixed):
        return Answer.FIRST_FIXED if fixed else Answer.FIRST_BAD

    @property
    def found(self):
        return self.last_old, self.first_new

    def lines(self, said):
        new, old = said.name(self.first_new), said.name(self.last_old)
        return [f"first fixed: {new}; last failing before it: {old}" if said.fixed else
                f"first bad: {new}; last good before it: {old}"]


@dataclasses.dataclass(frozen=True)
class SkippedBetween(Verdict):
    """The change is at ``first_new`` or at one of the untestable points before it."""
    ANSWER = Answer.INCONCLUSIVE
    last_old: Point
    first_new: Point
    skipped: tuple
    non_monotonic: tuple = ()

    def fields(self, said):
        why = {p.id: next(r.why(WHY_TAIL) for r in reversed(said.results) if r.point == p.id) for p in self.skipped}
        return {"last_old": self.last_old.to_json(), "first_new": self.first_new.to_json(),
                "skipped": [{"id": p.id, "label": p.label, "why": why[p.id]} for p in self.skipped]}

    def lines(self, said):
        out = [f"inconclusive: the {'fix' if said.fixed else 'change'} is in {said.name(self.first_new)} or one of the "
               f"{len(self.skipped)} skipped point(s) after {said.name(self.last_old)}:"]
        return out + [f"  skipped {said.name(p)}: {said.at(p)}" for p in self.skipped]


@dataclasses.dataclass(frozen=True)
class UntestableEndpoint(Verdict):
    """An endpoint could not be tested, so the range cannot be verified."""
    ANSWER = Answer.INCONCLUSIVE
    endpoint: Point
    expected: Term

    def lines(self, said):
        return [f"inconclusive: the endpoint {said.name(self.endpoint)} is untestable, so the range cannot be verified",
                f"why: {said.at(self.endpoint)}"]


@dataclasses.dataclass(frozen=True)
class NotInRange(Verdict):
    """An old endpoint (or the merge base) already behaves like the new end."""
    ANSWER = Answer.NOT_IN_RANGE
    endpoint: Point
    new_end: Point
    new_end_term: Term
    merge_base: bool = False

    def fields(self, said):
        d = {"endpoint": self.endpoint.to_json(), "new_end": self.new_end.id, "new_end_term": self.new_end_term}
        return {**d, "merge_base": True} if self.merge_base else d

    def lines(self, said):
        ep = said.name(self.endpoint)
        if self.merge_base:
            out = [f"not in range: the merge base {ep} already {said.bad} the test, so the change is "
                   "older than where the two refs' histories fork"]
        elif said.fixed:
            out = [f"not in range: the old endpoint {ep} already passes: it was fixed before this range "
                   "(or the environment changed), not by a change inside it"]
        else:
            out = [f"not in range: the good endpoint {ep} fails too: the environment changed or the failure is "
                   "older; no change in this range is the cause"]
        out.append(f"the test at {ep} said: {said.at(self.endpoint)}")
        if self.new_end_term is NEW:
            out.append(f"it {said.bad} at both ends; at {said.name(self.new_end)} the test said: {said.at(self.new_end)}")
        else:
            out.append(f"the new end {said.name(self.new_end)} does not {'pass' if said.fixed else 'fail'} either "
                       f"({self.new_end_term}): check the range's direction (--fixed)")
        return out


@dataclasses.dataclass(frozen=True)
class CannotReproduce(Verdict):
    """The new endpoint behaves like the old one."""
    ANSWER = Answer.CANNOT_REPRODUCE
    endpoint: Point

    def lines(self, said):
        ep = said.name(self.endpoint)
        return [f"cannot reproduce: the {'new' if said.fixed else 'bad'} endpoint {ep} "
                f"{'still fails' if said.fixed else 'passes'}",
                f"the test at {ep} said: {said.at(self.endpoint)}"]


@dataclasses.dataclass(frozen=True)
class Flaky(Verdict):
    """Repeated runs at one point disagreed."""
    ANSWER = Answer.FLAKY
    point: Point
    runs: tuple

    def lines(self, said):
        return [f"flaky: repeated runs at {said.name(self.point)} disagreed ({', '.join(self.runs)}); "
                "fix the test or the machine before bisecting"]


@dataclasses.dataclass(frozen=True)
class Record:
    """A verdict and the run that led to it: what ``--json`` prints and the
    log's last line keep."""
    verdict: Verdict
    rng: Range
    fixed: bool
    results: tuple                  # every ``log.Result``, in the log's order
    commit_command: str | None = None   # a found release answer: the bisection of its commits

    def __post_init__(self):
        object.__setattr__(self, "results", tuple(self.results))

    @property
    def answer(self) -> Answer:
        return self.verdict.answer(self.fixed)

    def to_json(self) -> dict:
        said = Said(self.rng, self.fixed, self.results)
        d = self.verdict.to_json(said)
        d["steps"] = [{"point": r.point, "label": self.rng.point(r.point).label, "phase": r.phase,
                       "result": r.raw, "term": r.term, "seconds": r.seconds,
                       **({"dropped": list(r.dropped)} if r.dropped else {})} for r in self.results]
        d["executions"] = len(self.results)
        d["fixed"] = self.fixed
        d["words"] = self.verdict.words(said)
        if self.commit_command is not None:
            d["commit_command"] = self.commit_command
        return d
