"""The roll: every release newer than the pin, each topic's series tried on
it, one patch-health table (``tools/stack.py roll``; docs/stack.md, "roll").

For each release (pip's list, as every fetch here) and without a person:

- the pinned stack, whole and in order, as ``check --against`` tries it
  (``rebase.rebase``: strict git am, then, unless it is already upstream,
  git am --3way; already upstream found by reverse apply and, with
  ``--repo``, by ``git patch-id``, which names the upstream commit); the
  recorded conflict resolutions of port sessions (build/port-rr-cache) are
  reused, read only;
- each topic's series for that release (``ranges.series_for``: the one whose
  ``applies:`` ranges hold it); where that is a port series
  (patches/ports/<label>/<topic>/), it is tried as ``export --check`` tries it
  (``export.export_port``: strict git am on the port series it requires, and
  every patch's ``Evidence:`` run before and after it).

The result is typed (``Health``, ``Row``, ``ReleaseRoll``, ``Roll``), its JSON
derived in one place (``to_json``) and its Markdown in another
(``markdown``); ``health_of`` and ``proposals`` are pure functions of what
git and the evidence reported."""
import dataclasses
import enum
import re
import time
from pathlib import Path

from .. import builder, series, versions
from ..errors import UsageError
from . import evidence as evidencemod, ports
from .classify import Status
from .export import ExportStatus, export_port
from .json_form import fields_json, json_of
from .port.state import Outcome
from .ranges import Choice, Why, series_for
from .rebase import Onto, rebase


class Health(enum.StrEnum):
    """One patch on one release (its value is the table's word)."""
    APPLIED = "applied"                        # strict git am
    THREE_WAY = "3-way"                        # only git am --3way (or a recorded resolution)
    CONFLICT = "conflict"                      # neither: the failure report says where
    UPSTREAM = "upstream"                      # upstream already has it: propose dropping it
    PROBABLY_UPSTREAM = "probably upstream"    # applies in reverse with one line of context: for a person
    EVIDENCE_FAILS = "evidence fails"          # applies, but an Evidence: test fails with it
    NOT_PORTED = "not ported"                  # the port series says why it cannot carry it
    NOT_TRIED = "not tried"                    # an earlier patch of its port series does not apply


NEEDS_PERSON = (Health.CONFLICT, Health.PROBABLY_UPSTREAM, Health.EVIDENCE_FAILS, Health.NOT_TRIED)

FROM_GIT = {Status.APPLIED: Health.APPLIED, Status.APPLIED_3WAY: Health.THREE_WAY, Status.CONFLICT: Health.CONFLICT,
            Status.MERGED_UPSTREAM: Health.UPSTREAM, Status.EMPTIED: Health.UPSTREAM,
            Status.PROBABLY_UPSTREAM: Health.PROBABLY_UPSTREAM}


@dataclasses.dataclass(frozen=True)
class EvidenceTest:
    node: str
    before: str              # pytest outcome on the release with the series' earlier patches
    after: str               # and with this patch
    verdict: evidencemod.Verdict
    why: str = ""            # the first line of its failure, where it failed after


@dataclasses.dataclass(frozen=True)
class Cell:
    """What one series patch did on one release."""
    health: Health
    patch: str                          # the series' patch (a port patch, or the pinned one)
    series: str                         # patches/series or patches/ports/<label>/<topic>
    git: Status | None = None           # what git reported (None: not tried, or said by the series)
    upstream_commit: str = ""           # where upstream has it (git patch-id with --repo), if known
    reason: str = ""                    # an upstream / not-ported reason as the series says it
    reused: tuple = ()                  # paths a recorded resolution resolved
    failure: dict | None = None         # apply.py's failure report (builder.diagnose)
    evidence: tuple = ()                # EvidenceTest, in Evidence: order

    def word(self):
        """The table's cell: the health, where upstream has it, the port
        patch that carries it, the evidence in one figure."""
        w = str(self.health)
        if self.health is Health.UPSTREAM and self.upstream_commit:
            w = f"upstream at {self.upstream_commit[:10]}"
        if self.reused:
            w += " (recorded resolution)"
        if self.evidence:
            ok = sum(1 for t in self.evidence if t.verdict is evidencemod.Verdict.FAILS_THEN_PASSES)
            w += f", evidence {ok}/{len(self.evidence)}"
        return w


@dataclasses.dataclass(frozen=True)
class At:
    """A Cell on one release."""
    release: str
    cell: Cell


@dataclasses.dataclass(frozen=True)
class Row:
    """One pinned patch (or a port patch that carries none) across the releases."""
    topic: str
    patch: str
    cells: tuple             # At, in release order


@dataclasses.dataclass(frozen=True)
class Placed:
    """A Cell of one release in the table: its topic and the pinned patch
    it is about (None: a port patch that carries no pinned patch)."""
    topic: str
    pinned: str | None
    cell: Cell


@dataclasses.dataclass(frozen=True)
class TopicSeries:
    """The series a topic took on a release, and why (ranges.Choice)."""
    topic: str
    choice: Choice


@dataclasses.dataclass(frozen=True)
class Checked:
    """What check --against (a pinned patch) or export --check (a topic's port series) reported."""
    name: str
    status: Status | ExportStatus


@dataclasses.dataclass(frozen=True)
class ReleaseRoll:
    """One release: each topic's series chosen for it, what each of its
    patches did, and what ``check --against`` reports for the pinned stack."""
    release: str
    choices: tuple           # TopicSeries
    cells: tuple             # Placed
    pinned: tuple            # Checked (pinned patch, Status): the whole pinned stack, as check --against
    exports: tuple           # Checked (topic, ExportStatus): the port series, as export --check
    seconds: float


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A pinned patch upstream already has on a release: drop it there."""
    patch: str
    release: str
    series: str
    upstream_commit: str
    reason: str
    confirm: bool            # probably upstream: a person confirms first


@dataclasses.dataclass(frozen=True)
class Branch:
    """``--branch``: the topic port session the roll started onto the newest
    release, for a person to finish with ``port --continue``."""
    topic: str
    release: str
    outcome: Outcome         # stopped (waits for the person) or finished
    session: str             # build/port
    stopped_at: str = ""     # the patch it waits at
    text: str = ""           # the port session's report, as port --status prints it


@dataclasses.dataclass(frozen=True)
class Roll:
    pin: str
    releases: tuple          # ReleaseRoll, oldest first
    rows: tuple              # Row
    proposals: tuple         # Proposal
    seconds: float
    evidence: bool           # the Evidence: tests were run
    branch: Branch | None = None

    @property
    def needs_person(self):
        return any(a.cell.health in NEEDS_PERSON for r in self.rows for a in r.cells)

    @property
    def exit_code(self):
        """0 every topic's series carries onto every release; 1 some cell
        needs a person (the report is written all the same)."""
        return 1 if self.needs_person else 0

    def cell(self, release, patch):
        """The Cell of pinned patch (or port patch) ``patch`` on ``release``, or None."""
        row = next((r for r in self.rows if r.patch == patch), None)
        return next((a.cell for a in row.cells if a.release == release), None) if row else None

    def to_json(self):
        return {"status": "needs-person" if self.needs_person else "carried", **fields_json(self)}


to_json = json_of       # the JSON form of the roll's typed values (json_form: the one place it is derived)


# --------------------------------------------------------------------------
# pure decisions

def newer_releases(listed, pin):
    """The final releases in ``listed`` newer than ``pin``, oldest first
    (pre- and dev releases left out)."""
    p = versions.release(pin)
    out = [v for v in listed if (r := versions.release(v)) is not None and r > p
           and not r.is_prerelease and not r.is_devrelease]
    return sorted(set(out), key=versions.release)


def pinned_cell(entry, series_rel="patches/series"):
    """A ``rebase`` report's patch (rebase.RebasedPatch) as a Cell."""
    git = entry.status
    return Cell(FROM_GIT[git], entry.patch, series_rel, git, entry.upstream_commit or "",
                reused=tuple(entry.reused or ()),
                failure=entry.failure if git not in (Status.APPLIED, Status.APPLIED_3WAY) else None)


def evidence_tests(entry):
    """A port patch's (export.PortPatch) Evidence: tests as run."""
    out = []
    for t in (entry.evidence or {}).get("tests", []):
        verdict = evidencemod.Verdict(t["verdict"])
        out.append(EvidenceTest(t["node"], t["before"], t["after"], verdict,
                                t["after_reason"] if verdict is evidencemod.Verdict.FAILS_PATCHED else ""))
    return tuple(out)


def port_cells(port_rel, entries, total):
    """``export_port``'s patches (export.PortPatch: the patches tried, in
    order, of a series of ``total``) as Cells; the patches after one that
    does not apply are not tried."""
    out = []
    for e in entries:
        ev = evidence_tests(e)
        if e.status is not Status.APPLIED:
            out.append(Cell(Health.CONFLICT, e.patch, port_rel, e.status, failure=e.failure))
        elif any(t.verdict is evidencemod.Verdict.FAILS_PATCHED for t in ev):
            out.append(Cell(Health.EVIDENCE_FAILS, e.patch, port_rel, Status.APPLIED, evidence=ev))
        else:
            out.append(Cell(Health.APPLIED, e.patch, port_rel, Status.APPLIED, evidence=ev))
    return out


def needing(r, release):
    """The first topic (table order) with a cell on ``release`` that needs a person, or None."""
    return next((row.topic for row in r.rows for a in row.cells
                 if a.release == release and a.cell.health in NEEDS_PERSON), None)


def proposals(releases):
    """Every pinned patch a release's pinned series finds upstream (or
    probably so), where the pinned series is the one chosen for it."""
    out = []
    for r in releases:
        for x in r.cells:
            pinned, c = x.pinned, x.cell
            if c.series == "patches/series" and c.health in (Health.UPSTREAM, Health.PROBABLY_UPSTREAM):
                why = ("applies in reverse with one line of context" if c.health is Health.PROBABLY_UPSTREAM else
                       "same patch-id" if c.upstream_commit else
                       "the 3-way merge left nothing to change" if c.git is Status.EMPTIED else
                       "applies in reverse")
                out.append(Proposal(pinned, r.release, c.series, c.upstream_commit, why,
                                    c.health is Health.PROBABLY_UPSTREAM))
    return tuple(out)


def rows_of(stack_patches, releases):
    """The table's rows: every pinned patch in series order, then the port
    patches that carry no pinned patch; a cell per release where there is one."""
    rows = []
    for p in stack_patches:
        cells = tuple(At(r.release, x.cell) for r in releases for x in r.cells if x.pinned == p.name)
        rows.append(Row(p.topic, p.name, cells))
    extra = {}
    for r in releases:
        for x in r.cells:
            if x.pinned is None:
                extra.setdefault((x.topic, x.cell.patch), []).append(At(r.release, x.cell))
    rows += [Row(t, n, tuple(cells)) for (t, n), cells in extra.items()]
    return tuple(rows)


# --------------------------------------------------------------------------
# the work

def roll_release(root, lock, stack, version, cache=None, progress=None, repo=None, run_evidence=True,
                 rr_cache=None, test_python=None, topics=None):
    """One release: the pinned stack as check --against tries it, then
    each topic whose chosen series is a port series as export --check tries
    it.  Returns a ReleaseRoll."""
    say = progress or (lambda m: None)
    t0 = time.monotonic()
    onto = Onto(version=version, repo=repo)
    topics = [t for t in dict.fromkeys(p.topic for p in stack.patches) if not topics or t in topics]
    choices = [(t, series_for(root, lock.version, t, version)) for t in topics]
    say(f"v{version}: the pinned stack ({len(stack.patches)} patches), as check --against")
    report = rebase(lock, stack, onto, cache, progress, rr_cache=rr_cache)
    by_name = {e.patch: e for e in report.patches}
    cells, exports = [], []
    for topic, choice in choices:
        mine = [p for p in stack.patches if p.topic == topic]
        if choice.candidate.port is None:
            cells += [(topic, p.name, pinned_cell(by_name[p.name])) for p in mine]
            continue
        port = ports.load(Path(root) / choice.candidate.port)
        say(f"v{version}: topic {topic} from {port.rel} ({choice.why}), as export --check")
        out = export_port(root, lock, port, onto, None, cache, progress, run_tests=run_evidence,
                          test_python=test_python, write=False)
        exports.append((topic, out.status))
        got = port_cells(port.rel, out.patches, len(port.patches))
        tried = {c.patch for c in got}
        got += [Cell(Health.NOT_TRIED, p.name, port.rel) for p in port.patches if p.name not in tried]
        carried = set()
        for p, c in zip(port.patches, got):
            names = [n for n in ports.ports_of(p) if n in {q.name for q in mine}]
            carried.update(names)
            cells += [(topic, n, c) for n in names] or [(topic, None, c)]
            for n, reason in ports.dropped_in(p):
                carried.add(n)
                named = re.search(r"\b[0-9a-f]{7,40}\b", reason)      # "upstream already does this in <commit>"
                cells.append((topic, n, Cell(Health.UPSTREAM, n, port.rel, upstream_commit=named.group(0) if named
                                             else "", reason=reason)))
        for n, reason in ports.not_ported(port.dir):
            if n not in carried:
                carried.add(n)
                cells.append((topic, n, Cell(Health.NOT_PORTED, n, port.rel, reason=reason)))
    order = {p.name: p.index for p in stack.patches}
    cells.sort(key=lambda x: (order.get(x[1], len(order) + 1)))
    return ReleaseRoll(version, tuple(TopicSeries(t, c) for t, c in choices), tuple(Placed(*x) for x in cells),
                       tuple(Checked(e.patch, e.status) for e in report.patches),
                       tuple(Checked(t, s) for t, s in exports), round(time.monotonic() - t0, 1))


def roll(root, lock, releases, cache=None, progress=None, repo=None, run_evidence=True, rr_cache=None,
         test_python=None, topics=None):
    """Every release of ``releases`` (oldest first), as ``roll_release``;
    ``topics``: those topics' rows only (None: every topic)."""
    say = progress or (lambda m: None)
    t0 = time.monotonic()
    stack = series.load(root)
    have = list(dict.fromkeys(p.topic for p in stack.patches))
    unknown = [t for t in topics or () if t not in have]
    if unknown:
        raise UsageError(f"roll --topic {unknown[0]}: no patch of patches/series has Topic: {unknown[0]}",
                         hint=f"give a topic of the pinned stack: {', '.join(have)}")
    done = []
    for i, v in enumerate(releases, 1):
        say(f"release {i}/{len(releases)} v{v}")
        done.append(roll_release(root, lock, stack, v, cache, progress, repo, run_evidence, rr_cache, test_python,
                                 topics))
    done = tuple(done)
    shown = [p for p in stack.patches if not topics or p.topic in topics]
    return Roll(lock.version, done, rows_of(shown, done), proposals(done),
                round(time.monotonic() - t0, 1), run_evidence)


# --------------------------------------------------------------------------
# the Markdown report

FAILURE_LINES = 24      # of a failure report in roll.md (roll.json keeps it whole)


def _md(text):
    return str(text).replace("|", "/").replace("\n", " ")


def markdown(r, command="python tools/stack.py roll"):
    """The report for people: the patch-health table, the series each
    release took, the proposals, each failure."""
    rels = [x.release for x in r.releases]
    lines = [f"# Roll: the stack pinned at v{r.pin} on {', '.join('v' + v for v in rels) or 'no newer release'}",
             "", f"`{command}`: {len(rels)} release(s) in {r.seconds:.0f} s"
             + ("" if r.evidence else " (--no-evidence: the Evidence: tests not run)") + ".", ""]
    if not rels:
        return "\n".join(lines + ["No release newer than the pin.", ""])
    lines += ["| topic | patch | " + " | ".join(f"v{v}" for v in rels) + " |",
              "|---|---|" + "---|" * len(rels)]
    for row in r.rows:
        got = {a.release: a.cell for a in row.cells}
        words = []
        for v in rels:
            c = got.get(v)
            if c is None:
                words.append("")
                continue
            w = c.word()
            if c.series != "patches/series":
                w += " (port" + (f" {c.patch}" if c.patch != row.patch else "") + ")"
            words.append(_md(w))
        lines.append(f"| {row.topic} | {row.patch} | " + " | ".join(words) + " |")
    lines += ["", "A cell is the patch on that release in the series chosen for it: `(port)` a port series "
              "(patches/ports/), else the pinned patches/series as `check --against` applies it; `evidence k/n`: "
              "k of its n Evidence: tests fail before it and pass with it.", "", "## Series per release", ""]
    for x in r.releases:
        said = ", ".join(f"{t.topic}: {t.choice.candidate.rel}"
                         + ("" if t.choice.why is Why.RANGE else f" ({t.choice.why})") for t in x.choices)
        check = sum(1 for c in x.pinned if c.status in (Status.APPLIED, Status.APPLIED_3WAY))
        lines.append(f"- v{x.release} ({x.seconds:.0f} s): {said}; the pinned stack: {check}/{len(x.pinned)} "
                     "apply (check --against)"
                     + "".join(f"; {c.name} port: {c.status}" for c in x.exports))
    if r.proposals:
        lines += ["", "## Proposed for dropping", ""]
        for p in r.proposals:
            at = f" at {p.upstream_commit[:12]}" if p.upstream_commit else ""
            lines.append(f"- {p.patch} from {p.series} on v{p.release}: upstream{at} ({p.reason})"
                         + (": confirm first" if p.confirm else ""))
    if r.branch:
        b = r.branch
        lines += ["", "## Branch", "",
                  f"Topic {b.topic} onto v{b.release}: a port session in `{b.session}` (the tree's branch "
                  "`patched`), " + (f"stopped at {b.stopped_at}: finish it with `python tools/stack.py port "
                                    "--continue` (docs/stack.md, \"Topic port\")." if b.outcome is Outcome.STOPPED
                                    else f"{b.outcome}."), "", "```", *b.text.splitlines(), "```"]
    fails = [(x.release, p.cell) for x in r.releases for p in x.cells if p.cell.failure or
             p.cell.health is Health.EVIDENCE_FAILS]
    seen = set()
    if fails:
        lines += ["", "## Failures", ""]
    for v, c in fails:
        if (v, c.series, c.patch) in seen:
            continue
        seen.add((v, c.series, c.patch))
        lines += [f"### v{v} {c.series}: {c.patch}: {c.health}", "", "```"]
        if c.failure:
            report = builder.format_failure(c.failure).splitlines()
            lines += report[:FAILURE_LINES]
            if len(report) > FAILURE_LINES:
                lines.append(f"... {len(report) - FAILURE_LINES} more line(s): roll.json has the whole report")
        lines += [f"evidence {t.node}: before {t.before}, after {t.after}: {t.why}" for t in c.evidence
                  if t.verdict is evidencemod.Verdict.FAILS_PATCHED]
        lines += ["```", ""]
    reasons = [(x.release, p.cell) for x in r.releases for p in x.cells
               if p.cell.health in (Health.NOT_PORTED, Health.UPSTREAM) and p.cell.reason]
    if reasons:
        lines += ["", "## What the port series say", ""]
        for v, c in dict(((c.series, c.patch, c.health), (v, c)) for v, c in reasons).values():
            lines.append(f"- {c.series}: {c.patch}: {c.health}: {_md(c.reason)}")
    return "\n".join(lines).rstrip("\n") + "\n"
