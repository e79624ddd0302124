"""Ported topic series: ``patches/ports/<label>/<topic>/`` (a ``series`` file
and its patch mails, made against that upstream's tree), what each port
patch says it carries (``Ports:``, the "Dropped: X.patch — upstream already
does this in ..." sentences), its evidence tests (``Evidence:``) and the
upstream-style test files it adds; which pinned patches a label's ports
cover.  Parsing only: no git, nothing run (docs/stack.md)."""
import dataclasses
import re
import textwrap
from pathlib import Path

from .. import series
from .classify import RESOLVED, Status

PORTS = Path("patches") / "ports"
HEX = re.compile(r"^[0-9a-f]{7,40}$")
DOWNSTREAM = ("Topic", "Upstream-Status", "Ports", "Evidence", "Requires")   # trailers stripped on export
DROPPED = re.compile(
    r"Dropped:\s+([A-Za-z0-9][A-Za-z0-9._+-]*\.patch)\s*(?:—|–|--|-)\s*"
    r"(upstream already does this in\b[^\n]*(?:\n(?!\n|Dropped:|[A-Za-z][A-Za-z0-9-]*: )[^\n]*)*)")


# a pinned patch the port cannot carry honestly, said in the series file:
#   # not ported: X.patch -- why (the v0.5.23 code it extends, what a port would take)
#   #   (continuation lines start with '#' and more indentation)
NOT_PORTED = re.compile(r"^#\s*not ported:\s+([A-Za-z0-9][A-Za-z0-9._+-]*\.patch)\s*(?:—|–|--|-|:)\s*(.*)$")


def label_of(onto):
    """The folder name of ports onto ``onto``: ``v<version>`` for a release,
    else the commit as given."""
    return f"v{onto.version}" if onto.version else (onto.commit or "")


def label_dirs(root, onto):
    """The existing ``patches/ports/<label>`` folders for ``onto``: the
    release's ``v<version>``, or the commit's (as given, or a folder named by
    a prefix of it, 7 hex digits or more)."""
    base = Path(root) / PORTS
    if not base.is_dir():
        return []
    labels = [label_of(onto)]
    if not onto.version and HEX.match(onto.commit or ""):
        labels += sorted(d.name for d in base.iterdir() if HEX.match(d.name)
                         and (onto.commit.startswith(d.name) or d.name.startswith(onto.commit)))
    return [base / l for l in dict.fromkeys(labels) if (base / l).is_dir()]


def port_dir(root, topic, onto):
    """``patches/ports/<label>/<topic>`` when it holds a series for ``onto``,
    else None."""
    return next((d / topic for d in label_dirs(root, onto) if (d / topic / "series").is_file()), None)


@dataclasses.dataclass
class PortSeries:
    dir: Path
    label: str
    topic: str
    patches: list          # series.Patch, in series order

    @property
    def rel(self):
        return (PORTS / self.label / self.topic).as_posix()


def where(port_rel, name):
    return f"{port_rel}/{name}"


def parse(d, name, index):
    """One port patch: paths under python/ or test/."""
    rel = (PORTS / d.parent.name / d.name).as_posix()
    return series.parse_patch(d / name, index, where=where(rel, name), roots=series.PORT_ROOTS)


def load(d):
    """The port series in folder ``d`` (UsageError for a series or a patch
    that does not parse)."""
    d = Path(d)
    patches = [parse(d, n, i) for i, n in enumerate(series.read_series(d), 1)]
    return PortSeries(dir=d, label=d.parent.name, topic=d.name, patches=patches)


def not_ported(d):
    """[(pinned patch, reason)] from the series file's "# not ported: X.patch
    -- reason" comments (a reason may continue on comment lines indented
    past the '#')."""
    out, current = [], None
    for line in (Path(d) / "series").read_text(encoding="utf-8").splitlines():
        m = NOT_PORTED.match(line.strip())
        if m:
            current = [m.group(1), m.group(2).strip()]
            out.append(current)
        elif current is not None and re.match(r"^#\s{2,}\S", line):
            current[1] = f"{current[1]} {line.lstrip('#').strip()}".strip()
        else:
            current = None
    return [(n, r) for n, r in out]


def with_not_ported(text, entries):
    """A series file's ``text`` whose "# not ported:" comments are those of
    ``entries`` (``(pinned patch, reason)``), placed before the first
    entry (the other comments and the entries kept as they are)."""
    lines, out, inside = text.splitlines(), [], False
    for line in lines:
        if NOT_PORTED.match(line.strip()):
            inside = True
            continue
        if inside and re.match(r"^#\s{2,}\S", line):
            continue
        inside = False
        out.append(line)
    said = []
    for name, reason in entries:
        wrapped = textwrap.wrap(f"not ported: {name} -- {' '.join(reason.split())}", 96,
                                subsequent_indent="  ", break_on_hyphens=False)
        said += [f"# {l}" for l in wrapped]
    at = next((i for i, l in enumerate(out) if l.split("#", 1)[0].strip()), len(out))
    return "\n".join(out[:at] + said + out[at:]) + "\n"


def requires(port):
    """The topics whose port series (same label) this series applies on
    (its patches' ``Requires:`` trailers, in order, each once)."""
    names = [n for p in port.patches for n in re.split(r"[,\s]+", p.trailers.get("Requires", "")) if n]
    return list(dict.fromkeys(names))


def ports_of(patch):
    """The pinned patches a port patch carries (its ``Ports:`` trailer)."""
    return [n for n in re.split(r"[,\s]+", patch.trailers.get("Ports", "")) if n]


def evidence_of(patch):
    """Its evidence: pytest node ids (``Evidence:``, space-separated)."""
    return patch.trailers.get("Evidence", "").split()


def message(patch):
    """The commit message as written (trailers included)."""
    head, _, rest = patch.raw.decode("utf-8", "replace").partition("\n\n")
    return re.split(r"\n---\n|\ndiff --git ", rest, maxsplit=1)[0]


def dropped_in(patch):
    """[(pinned patch, reason)] from its "Dropped: X.patch — upstream
    already does this in ..." sentences."""
    return [(m.group(1), " ".join(m.group(2).split())) for m in DROPPED.finditer(message(patch))]


def upstream_tests(patch):
    """The upstream-style test files it adds (``test/.../test_*.py``)."""
    return [pf.path for pf in patch.patchset if pf.is_added_file and pf.path.startswith("test/")
            and Path(pf.path).name.startswith("test_") and pf.path.endswith(".py")]


def coverage(root, onto):
    """{pinned patch name: what covers it} for every topic ported to
    ``onto``: {"port": "patches/ports/<label>/<topic>/<patch>"} or
    {"dropped": reason, "port": the series folder}."""
    out = {}
    for base in label_dirs(root, onto):
        for d in sorted(p for p in base.iterdir() if (p / "series").is_file()):
            port = load(d)
            for p in port.patches:
                for name, reason in dropped_in(p):
                    out.setdefault(name, {"dropped": reason, "port": port.rel})
                for name in ports_of(p):
                    out[name] = {"port": where(port.rel, p.name)}
    return out


def not_ported_in(root, onto):
    """{pinned patch name: {"not_ported": reason, "port": the series folder}}
    for the patches a port series onto ``onto`` says it cannot carry."""
    out = {}
    for base in label_dirs(root, onto):
        for d in sorted(p for p in base.iterdir() if (p / "series").is_file()):
            for name, reason in not_ported(d):
                out.setdefault(name, {"not_ported": reason, "port": (PORTS / base.name / d.name).as_posix()})
    return out


def _each(report, change):
    """The rebase report (rebase.RebaseReport) with ``change(patch)`` (a
    RebasedPatch, or None: unchanged) for each of its patches."""
    return dataclasses.replace(report, patches=tuple(change(r) or r for r in report.patches))


def mark_not_ported(report, said):
    """The rebase report with what the port series say they do not carry
    (``not_ported_in``): the patch keeps what git reported; the reason is
    added."""
    return _each(report, lambda r: dataclasses.replace(r, not_ported=said[r.patch])
                 if r.patch in said and r.status is not Status.PORTED else None)


def mark_covered(report, cover):
    """check --against's report with the port that carries each patch named
    beside what git reported (``covered``), the status unchanged."""
    return _each(report, lambda r: dataclasses.replace(r, covered=cover[r.patch]) if r.patch in cover else None)


def mark_ported(report, cover):
    """The rebase report with every pinned patch that ``cover`` names
    marked ``ported`` (what git reported kept as ``git_status``).  A ported
    patch still counts as unresolved: the pinned stack cannot carry it onto
    that upstream; the port series replaces it there."""
    report = _each(report, lambda r: dataclasses.replace(r, git_status=r.status, status=Status.PORTED,
                                                         ported=cover[r.patch]) if r.patch in cover else None)
    return dataclasses.replace(report, ported=sum(1 for r in report.patches if r.status is Status.PORTED),
                               resolved=all(r.status in RESOLVED for r in report.patches))


def covering(root, onto):
    """The port series folders made for ``onto`` (patches/ports/<label>/<topic>, relative), in topic order."""
    return [(PORTS / base.name / d.name).as_posix() for base in label_dirs(root, onto)
            for d in sorted(p for p in base.iterdir() if (p / "series").is_file())]


def covering_line(root, onto):
    """One line naming the port series made for ``onto`` and how many pinned
    patches they carry, or "" when there are none."""
    have = covering(root, onto)
    if not have:
        return ""
    n = len(coverage(root, onto))
    return (f"port series for {onto.label}: {', '.join(have)} ({n} pinned patch(es) carried or said "
            f"upstream; tools/stack.py export --topic T --onto {onto.label} --check verifies one)")
