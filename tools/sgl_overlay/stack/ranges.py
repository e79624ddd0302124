"""Per-patch version ranges: which upstream releases each patch of a series
applies to, said on its series line as a comment annotation

    budget-ledger.patch    # applies: >=0.5.17,<0.5.23

(a PEP 440 specifier set, the releases only), and the series of a topic
whose ranges hold a release: the pinned one (``patches/series``) or a port
series (``patches/ports/<label>/<topic>/series``).  Parsing and pure
decisions only (docs/stack.md, "Version ranges")."""
import dataclasses
import enum
import re
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .. import series, versions
from ..errors import UsageError

APPLIES = re.compile(r"\bapplies:\s*(.*?)\s*$")


@dataclasses.dataclass(frozen=True)
class Range:
    """One series line's ``applies:`` annotation."""
    patch: str
    spec: str            # as written, e.g. ">=0.5.17,<0.5.23"
    line: int

    def holds(self, version):
        return SpecifierSet(self.spec).contains(Version(version), prereleases=True)


def check_spec(spec):
    """The problem with an ``applies:`` specifier, or None: a PEP 440
    specifier set whose every bound is a release version."""
    if not spec:
        return "is empty"
    try:
        s = SpecifierSet(spec)
    except InvalidSpecifier:
        return "is not a version range such as >=0.5.17,<0.5.23"
    for one in s:
        try:
            Version(one.version.rstrip(".*"))
        except InvalidVersion:
            return f"bound {one!s} is not a version"
        if versions.release(one.version.rstrip(".*")) is None:
            return f"bound {one!s} is not a release version"
    return None


def read(series_dir):
    """{patch name: Range or None} for every entry of ``series_dir``'s
    series file, in order; [(line, patch, problem)] for annotations that do
    not parse (those entries map to None)."""
    text = (Path(series_dir) / "series").read_text(encoding="utf-8")
    out, problems = {}, []
    for n, line in enumerate(text.splitlines(), 1):
        entry, _, comment = line.partition("#")
        entry = entry.strip()
        if not entry:
            continue
        m = APPLIES.search(comment)
        if not m:
            out[entry] = None
            continue
        bad = check_spec(m.group(1))
        if bad:
            problems.append((n, entry, f"applies: {m.group(1)!r} {bad}"))
            out[entry] = None
        else:
            out[entry] = Range(entry, m.group(1), n)
    return out, problems


class Holds(enum.StrEnum):
    """Whether a series' ranges hold a release."""
    YES = "yes"              # every entry has a range and every range holds it
    NO = "no"                # some entry's range does not hold it
    UNSAID = "unsaid"        # no entry says a range (the folder's label decides)
    PARTLY = "partly"        # some entries say a range, others do not (a lint finding)


def holds(rngs, version):
    """Holds of one series' ranges (``read``'s first value, restricted to
    the entries in question) for ``version``."""
    said = [r for r in rngs.values() if r is not None]
    if not said:
        return Holds.UNSAID
    if any(not r.holds(version) for r in said):
        return Holds.NO
    return Holds.YES if len(said) == len(rngs) else Holds.PARTLY


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A series of one topic: the pinned one (``port`` None) or a port series."""
    topic: str
    label: str               # "v<version>" of the release it was made on (the pin's for the pinned series)
    port: Path | None        # patches/ports/<label>/<topic>, or None for the pinned patches
    holds: Holds

    @property
    def rel(self):
        return (self.port.as_posix() if self.port else "patches/series")

    @property
    def made_on(self):
        return self.label[1:] if self.label.startswith("v") else None


class Why(enum.StrEnum):
    """Why a series was chosen for a release."""
    RANGE = "its ranges hold the release"
    LABEL = "made on that release (no ranges said)"
    PIN = "the pinned series (no ranges said)"
    NEWEST = "no range holds it: the newest earlier series"


@dataclasses.dataclass(frozen=True)
class Choice:
    candidate: Candidate
    why: Why

    def to_json(self):
        return {"series": self.candidate.rel, "why": str(self.why), "holds": str(self.candidate.holds)}


def candidates(root, pinned_version, topic, version):
    """Every series of ``topic`` (the pinned patches, then each release
    label's port folder), each with how its ranges hold ``version``."""
    root = Path(root)
    rngs, _ = read(root / "patches")
    stack = series.load(root, strict=False)
    mine = {p.name: rngs.get(p.name) for p in stack.patches if p.topic == topic}
    out = [Candidate(topic, f"v{pinned_version}", None, holds(mine, version))] if mine else []
    base = root / "patches" / "ports"
    if base.is_dir():
        for label in sorted((d for d in base.iterdir() if d.name.startswith("v")
                             and versions.release(d.name[1:]) is not None), key=lambda d: versions.release(d.name[1:])):
            d = label / topic
            if (d / "series").is_file():
                out.append(Candidate(topic, label.name, d.relative_to(root), holds(read(d)[0], version)))
    return out


def choose(cands, version):
    """The series of a topic for release ``version`` (a pure decision over
    ``candidates``): one whose ranges hold it (the newest such), else one
    made on that very release with no ranges said, else the pinned series
    when it says none, else the newest made on an earlier release (or the
    pinned one).  None when the topic has no series at all."""
    if not cands:
        return None
    v = versions.release(version)
    newest_first = sorted(cands, key=lambda c: versions.release(c.made_on) if c.made_on else v, reverse=True)
    for c in newest_first:
        if c.holds is Holds.YES:
            return Choice(c, Why.RANGE)
    for c in newest_first:
        if c.holds is Holds.UNSAID and c.made_on == version and c.port is not None:
            return Choice(c, Why.LABEL)
    pinned = next((c for c in cands if c.port is None), None)
    if pinned is not None and pinned.holds is Holds.UNSAID:
        return Choice(pinned, Why.PIN)
    earlier = [c for c in newest_first if c.made_on and versions.release(c.made_on) <= v]
    return Choice(earlier[0] if earlier else newest_first[-1], Why.NEWEST)


def series_for(root, pinned_version, topic, version):
    """The Choice of ``topic``'s series for release ``version`` in checkout ``root``."""
    return choose(candidates(root, pinned_version, topic, version), version)


def with_ranges(text, spec, new=False):
    """A series file's ``text`` whose entry lines without an ``applies:``
    range get ``# applies: SPEC``, where some line already says one (or the
    series is ``new``); a series that says none is left as it is."""
    lines = text.splitlines()
    entries = [l for l in lines if l.split("#", 1)[0].strip()]
    if not new and not any(APPLIES.search(l.partition("#")[2]) for l in entries):
        return text
    out = []
    for l in lines:
        entry, sep, comment = l.partition("#")
        if entry.strip() and not APPLIES.search(comment):
            l = f"{entry.rstrip()}  # applies: {spec}" if not sep else f"{l}; applies: {spec}"
        out.append(l)
    return "\n".join(out) + "\n"


def series_dirs(root):
    """patches/ and every port series folder (patches/ports/<label>/<topic>/), as paths relative to ``root``."""
    root = Path(root)
    out = [Path("patches")]
    base = root / "patches" / "ports"
    if base.is_dir():
        out += sorted(d.relative_to(root) for d in base.glob("*/*") if (d / "series").is_file())
    return out


def outside(root, version):
    """The pinned patches (patches/series) whose ``applies:`` range does not hold ``version``."""
    rngs, _ = read(Path(root) / "patches")
    return [r for r in rngs.values() if r is not None and not r.holds(version)]


def refuse_outside(root, version):
    """apply's rule: the pinned series is the pin's; a pinned patch whose
    range does not hold the pin is refused (exit 2) before any work."""
    bad = outside(root, version)
    if bad:
        r = bad[0]
        raise UsageError(f"patches/series:{r.line}: {r.patch} applies to {r.spec}, which does not hold the pin "
                         f"v{version}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                         hint="correct its applies: range (tools/stack.py roll shows where it applies), or drop it "
                              "from the series")
