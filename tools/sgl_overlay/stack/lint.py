"""Lint: every problem with the stack, and with the ported series in
patches/ports/**."""
import dataclasses
import enum
import re
from pathlib import Path

from .. import series, versions
from ..errors import FAILED, OK, UsageError
from . import ports, ranges
from .json_form import Result


class LintStatus(enum.StrEnum):
    OK = "ok"
    FINDINGS = "findings"


@dataclasses.dataclass(frozen=True)
class LintReport(Result):
    """``lint``: every finding (dicts: patch, field, error, hint)."""
    status: LintStatus
    problems: tuple

    @property
    def exit_code(self):
        """0 clean; 1 findings."""
        return FAILED if self.problems else OK


def lint_report(root, roll=None):
    """``lint`` as the verb reports it."""
    problems = tuple(lint(root, roll))
    return LintReport(LintStatus.FINDINGS if problems else LintStatus.OK, problems)


def _problem(patch, field, error, hint):
    return {"patch": patch, "field": field, "error": error, "hint": hint}


def _whitespace(p, where, label):
    for pf in p.patchset:
        for h in pf:
            for line in h:
                if line.is_added and line.value.rstrip("\n") != line.value.rstrip():
                    return [_problem(label, "whitespace",
                                     f"{where}: trailing whitespace in an added line of {pf.path} "
                                     f"(line {line.target_line_no})", "strip it in the tree and refresh")]
    return []


def lint(root, roll=None):
    """Every problem with the stack, as dicts (patch, field, error, hint);
    ``roll``: a roll report (its JSON), whose findings the applies: ranges
    must agree with."""
    root = Path(root)
    try:
        stack = series.load(root, strict=False)
    except UsageError as e:
        return [{"patch": None, "field": "series", "error": e.message, "hint": e.hint}]
    return lint_series(stack.patches) + lint_ports(root, stack) + lint_ranges(root, roll)


# what the roll found that a range holding that release contradicts
NOT_CARRIED = {"conflict", "upstream", "probably upstream", "evidence fails", "not tried"}
CHECK_CARRIES = {"applied", "applied-3way"}


def lint_ranges(root, roll=None):
    """The applies: ranges of patches/series and every port series: their
    syntax, all or none of a series' lines said, and, with a roll report,
    no range holding a release on which the roll found the patch not carried."""
    problems, said = [], {}
    for rel in ranges.series_dirs(root):
        where = f"{rel.as_posix()}/series"
        try:
            rngs, bad = ranges.read(Path(root) / rel)
        except (OSError, UnicodeDecodeError):
            continue                          # lint_ports names a series that cannot be read
        problems += [_problem(name, "applies", f"{where}:{line}: {name}: {why}",
                              "a PEP 440 range of releases after the name, e.g. "
                              "'budget-ledger.patch  # applies: >=0.5.17,<0.5.23'") for line, name, why in bad]
        unsaid = [n for n, r in rngs.items() if r is None and not any(b[1] == n for b in bad)]
        if unsaid and len(unsaid) < len(rngs):
            problems.append(_problem(unsaid[0], "applies", f"{where}: {', '.join(unsaid)} say(s) no applies: "
                                     "range, while other lines of the series do",
                                     "give every line of a series its range (docs/stack.md, 'Version ranges')"))
        said[rel.as_posix()] = rngs
    if roll:
        problems += _against_roll(said, roll)
    return problems


def _against_roll(said, roll):
    """A range that holds a release on which the roll found its patch not carried."""
    out = []
    found = []
    for r in roll.get("releases", []):
        v = r["release"]
        found += [("patches", c["name"], v, c["status"]) for c in r.get("pinned", [])
                  if c["status"] not in CHECK_CARRIES]
        found += [(p["cell"]["series"], p["cell"]["patch"], v, p["cell"]["health"]) for p in r.get("cells", [])
                  if p["cell"]["series"] != "patches/series" and p["cell"]["health"] in NOT_CARRIED]
    for rel, name, v, what in found:
        rng = said.get(rel, {}).get(name)
        if rng is not None and rng.holds(v):
            out.append(_problem(name, "applies", f"{rel}/series:{rng.line}: {name} applies to {rng.spec}, which "
                                f"holds v{v}, where the roll found it {what}",
                                f"narrow its range to leave v{v} out (or port it there: tools/stack.py port "
                                f"--topic T --onto {v})"))
    return out


def lint_series(patches):
    """The problems of the series' own patches (series.Patch; not patches/ports/**)."""
    problems = []
    for p in patches:
        for field, message, hint in series.lint(p):
            problems.append(_problem(p.name, field, message, hint))
        problems += _whitespace(p, f"patches/{p.name}", p.name)
        if p.topic == "debug" and not p.upstream_status.startswith("Inappropriate"):
            problems.append(_problem(p.name, "Upstream-Status",
                                     f"patches/{p.name}: the debug topic is marked {p.upstream_status!r}",
                                     "debug instrumentation is not for upstream: "
                                     "Upstream-Status: Inappropriate [debug instrumentation]"))
    return problems


def _label_ok(name):
    if ports.HEX.match(name):
        return True
    return name.startswith("v") and versions.release(name[1:]) is not None


def lint_ports(root, stack):
    """Every problem with patches/ports/<label>/<topic>/ (docs/stack.md)."""
    base = Path(root) / ports.PORTS
    if not base.is_dir():
        return []
    problems = []
    for label in sorted(base.iterdir()):
        rel = f"{ports.PORTS.as_posix()}/{label.name}"
        if not label.is_dir() or not _label_ok(label.name):
            problems.append(_problem(None, "ports", f"{rel}: not a release tag (v0.5.23) or a commit folder",
                                     "name a port folder patches/ports/v<version>/ or patches/ports/<commit>/"))
            continue
        for d in sorted(label.iterdir()):
            problems += lint_port(root, stack, d)
    return problems


def lint_port(root, stack, d):
    rel = f"{ports.PORTS.as_posix()}/{d.parent.name}/{d.name}"
    if not d.is_dir() or not series.TOPIC.match(d.name):
        return [_problem(None, "ports", f"{rel}: not a topic folder", "patches/ports/<label>/<topic>/, "
                         "the topic in lower-case letters, digits and '-'")]
    try:
        names = series.read_series(d)
    except UsageError as e:
        return [_problem(None, "series", e.message, e.hint)]
    problems, patches = [], []
    for i, n in enumerate(names, 1):
        try:
            patches.append(ports.parse(d, n, i))
        except UsageError as e:
            problems.append(_problem(ports.where(rel, n), "patch", e.message, e.hint))
    pinned = {p.name: p for p in stack.patches}
    accounted = set()
    for p in patches:
        where = ports.where(rel, p.name)
        problems += [_problem(where, f, m, h) for f, m, h in series.lint(p, where)]
        problems += _whitespace(p, where, where)
        if p.topic and p.topic != d.name:
            problems.append(_problem(where, "Topic", f"{where}: Topic {p.topic!r} in the port folder of {d.name!r}",
                                     f"Topic: {d.name}, or move the patch"))
        named = ports.ports_of(p)
        dropped = [n for n, _ in ports.dropped_in(p)]
        if "Ports" not in p.trailers:
            problems.append(_problem(where, "Ports", f"{where}: missing trailer 'Ports:'",
                                     "name the pinned patches (patches/*.patch) this port patch carries"))
        for n in named + dropped:
            if n not in pinned:
                problems.append(_problem(where, "Ports", f"{where}: names {n!r}, which is not in patches/series",
                                         "name the pinned patch files (patches/*.patch) it carries or drops"))
            elif pinned[n].topic != d.name:
                problems.append(_problem(where, "Ports", f"{where}: names {n!r} of topic {pinned[n].topic!r}",
                                         f"a port of {d.name!r} carries that topic's patches only"))
        accounted.update(named + dropped)
        problems += _lint_evidence(root, p, where)
    for n, reason in ports.not_ported(d):
        where = f"{rel}/series"
        if n not in pinned or pinned[n].topic != d.name:
            problems.append(_problem(where, "not ported", f"{where}: 'not ported: {n}' names no pinned patch of "
                                     f"topic {d.name!r}", "name a patch of patches/series with that Topic"))
        elif n in accounted:
            problems.append(_problem(where, "not ported", f"{where}: {n} is said not ported and is named by a "
                                     "port patch's 'Ports:' or 'Dropped:'", "keep one of the two"))
        elif not reason:
            problems.append(_problem(where, "not ported", f"{where}: 'not ported: {n}' gives no reason",
                                     "say why after the name: what of that upstream it would extend, and why "
                                     "it cannot be carried honestly"))
        accounted.add(n)
    for t in ports.requires(ports.PortSeries(d, d.parent.name, d.name, patches)):
        if t == d.name or not (d.parent / t / "series").is_file():
            problems.append(_problem(rel, "Requires", f"{rel}: 'Requires: {t}' names no other port series in "
                                     f"{ports.PORTS.as_posix()}/{d.parent.name}/",
                                     "name the topic whose port series this one applies on"))
    missing = [p.name for p in stack.patches if p.topic == d.name and p.name not in accounted]
    if missing and patches:
        problems.append(_problem(None, "Ports", f"{rel}: pinned patch(es) of topic {d.name!r} not accounted "
                                 f"for: {', '.join(missing)}",
                                 "name each in a port patch's 'Ports:', or say in a body "
                                 "'Dropped: X.patch — upstream already does this in <commit> (#PR)', or, "
                                 "where it cannot be ported, in the series '# not ported: X.patch -- why'"))
    if patches and not any(ports.upstream_tests(p) for p in patches):
        problems.append(_problem(None, "test", f"{rel}: no patch adds an upstream-style test (test/.../test_*.py)",
                                 "add a unit test in SGLang's own test/ layout, runnable on a CPU"))
    return problems


def _lint_evidence(root, p, where):
    nodes = ports.evidence_of(p)
    if not nodes:
        return [_problem(where, "Evidence", f"{where}: missing trailer 'Evidence:'",
                         "name the pytest node ids (taking --tree) that fail before this patch and pass after")]
    out = []
    for node in nodes:
        path, *names = node.split("::")
        f = Path(root) / path
        if not path.endswith(".py") or not f.is_file():
            out.append(_problem(where, "Evidence", f"{where}: Evidence {node!r}: no file {path}",
                                "give repo-relative node ids, e.g. tests/memory/test_x.py::test_y"))
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        for name in names:
            name = name.split("[", 1)[0]
            if not re.search(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b", text, re.M):
                out.append(_problem(where, "Evidence", f"{where}: Evidence {node!r}: {path} defines no {name!r}",
                                    "give an existing test's node id"))
    return out
