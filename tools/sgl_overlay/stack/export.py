"""Export: a topic's patches alone on an upstream, verified, as numbered
mails plus a pull-request description.  Where the topic has a ported series
for that upstream (``patches/ports/<label>/<topic>/``), that series is
exported instead: applied with strict git am, and its evidence really run
(``evidence``)."""
import dataclasses
import enum
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import builder, gitcmd, series
from ..errors import FAILED, OK, UsageError
from . import evidence, ports
from .classify import APPLIES, Status
from .json_form import Result, hidden, optional
from .ranges import Why, series_for
from .rebase import new_base, rebase
from .texts import format_patch, slug

DOWNSTREAM_TRAILERS = ports.DOWNSTREAM


class ExportStatus(enum.StrEnum):
    """The outcome of an export (its value is the report's word)."""
    EXPORTED = "exported"
    CHECKED = "checked"            # --check: everything an export verifies held; nothing written
    DOES_NOT_APPLY = "does-not-apply"
    TESTS_FAIL = "tests-fail"


@dataclasses.dataclass(frozen=True)
class Dropped(Result):
    """A pinned patch a port patch says upstream already has ("Dropped: X.patch -- ...")."""
    patch: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PortPatch(Result):
    """One patch of a ported series, applied with strict git am."""
    patch: str
    index: int
    subject: str
    topic: str
    ports: tuple               # the pinned patches it carries (Ports:)
    dropped: tuple             # Dropped
    status: Status             # applied, or conflict (the series stops there)
    failure: dict | None = optional()        # builder.diagnose()'s report, where it does not apply
    commit: str | None = optional()
    text: str | None = hidden()              # its commit as a mail
    evidence: dict | None = optional()       # evidence.run_series's report of its Evidence: tests


@dataclasses.dataclass(frozen=True)
class ExportReport(Result):
    """``export``: a topic alone on an upstream, and what became of it."""
    topic: str
    onto: str
    status: ExportStatus
    patches: tuple             # rebase.RebasedPatch (the pinned patches), or PortPatch (a ported series)
    files: tuple = ()          # what was written
    label: str | None = optional()           # a ported series: the state its evidence starts from
    port: str | None = optional()            # a ported series: its folder
    base: dict | None = optional()           # a ported series: the upstream's facts (rebase.new_base)
    requires: tuple | None = optional()      # the port series applied first ({"topic", "patches"})
    tests: dict | None = optional()          # the pinned patches: tests/<topic>'s run
    upstream_tests: tuple | None = optional()   # a ported series: its test/ files on pristine/patched
    warnings: tuple | None = optional()      # what the evidence does not show
    failed: tuple | None = optional()        # the tests that fail patched
    port_line: str | None = optional()       # the port series made for that upstream (--pinned: not used)

    @property
    def exit_code(self):
        """0 exported (or --check: checked); 1 it does not apply or its tests fail."""
        return OK if self.status in (ExportStatus.EXPORTED, ExportStatus.CHECKED) else FAILED


def strip_trailers(text):
    """Remove this project's downstream-only trailers from a mail."""
    head, sep, rest = text.partition("\n---\n")
    head = re.sub(r"(?m)^(%s): .*(\n|\Z)" % "|".join(DOWNSTREAM_TRAILERS), "", head)
    return head.rstrip("\n") + sep + rest if sep else head


def _refuse_inappropriate(topic, patches, where):
    inappropriate = [p.name for p in patches if p.upstream_status.startswith("Inappropriate")]
    if inappropriate:
        raise UsageError(f"topic {topic!r} is marked Upstream-Status: Inappropriate ({where}{inappropriate[0]})",
                         hint="it is downstream-only and is not exported; --check verifies it as an export "
                              "would (strict git am, the evidence run) and writes nothing")


def port_for(root, lock, topic, onto):
    """The port series folder export takes for ``topic`` on ``onto``, or
    None (the pinned patches): for a release, the series whose applies:
    ranges hold it (ranges.series_for), or, where none says a range, the
    port made on that release; for a commit, the port folder named by it."""
    if not onto.version:
        return ports.port_dir(root, topic, onto)
    choice = series_for(root, lock.version, topic, onto.version)
    if choice is None or choice.candidate.port is None or choice.why not in (Why.RANGE, Why.LABEL):
        return None
    return Path(root) / choice.candidate.port


def export(root, lock, topic, onto, out_dir, cache=None, progress=None, run_tests=True, test_python=None,
           use_port=True, check_only=False):
    """The topic's patches alone on ``onto``: verified to apply and to pass
    the topic's tests there, written as numbered mails plus a pull-request
    description.  A ported series for ``onto`` is exported instead of the
    pinned patches (``export_port``) unless ``use_port`` is false.
    ``check_only``: every check, nothing written (status ``checked``); the
    one way to verify a topic marked Upstream-Status: Inappropriate."""
    say = progress or (lambda m: None)
    root = Path(root)
    d = port_for(root, lock, topic, onto) if use_port else None
    if d:
        port = ports.load(d)
        if not check_only:
            _refuse_inappropriate(topic, port.patches, f"{port.rel}/")
        say(f"{'checking' if check_only else 'exporting'} the ported series {d.relative_to(root).as_posix()}")
        return export_port(root, lock, port, onto, out_dir, cache, progress, run_tests, test_python,
                           write=not check_only)
    stack = series.load(root)
    mine = [p for p in stack.patches if p.topic == topic]
    if not mine:
        topics = sorted({p.topic for p in stack.patches})
        raise UsageError(f"no patch has Topic: {topic}", hint=f"topics in the stack: {', '.join(topics) or 'none'}")
    if not check_only:
        _refuse_inappropriate(topic, mine, "")
    sub = dataclasses.replace(stack, patches=[dataclasses.replace(p, index=i) for i, p in enumerate(mine, 1)],
                              overlay=[])
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-export-"))
    try:
        tree = tmp / "tree"
        report = rebase(lock, sub, onto, cache, progress, keep=tree)
        out = {"topic": topic, "onto": onto.label, "patches": report.patches}
        bad = [r for r in report.patches if r.status not in APPLIES]
        if bad:
            return ExportReport(**out, status=ExportStatus.DOES_NOT_APPLY)
        tests = root / "tests" / topic
        if run_tests and tests.is_dir():
            say(f"running tests/{topic} against the exported tree")
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                                "--tree", str(tree)], capture_output=True, text=True, cwd=root)
            last = (p.stdout.strip().splitlines() or [""])[-1]
            out["tests"] = {"command": f"python -m pytest tests/{topic} --tree <exported tree>",
                            "exit": p.returncode, "summary": last}
            if p.returncode:
                return ExportReport(**out, status=ExportStatus.TESTS_FAIL)
        else:
            out["tests"] = {"summary": f"no tests/{topic} folder" if run_tests else "not run"}
        if check_only:
            return ExportReport(**out, status=ExportStatus.CHECKED)
        files = write_mails(out_dir, report.patches, _description(topic, mine, report, out))
        return ExportReport(**out, status=ExportStatus.EXPORTED, files=files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_mails(out_dir, entries, description):
    """The numbered mails (downstream trailers stripped, ``[PATCH i/n]``) and
    pull-request.md; returns the files written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for i, r in enumerate(entries, 1):
        f = out_dir / f"{i:04d}-{slug(r.subject)}.patch"
        text = strip_trailers(r.text)
        text = text.replace("Subject: [PATCH] ", f"Subject: [PATCH {i}/{len(entries)}] ", 1) \
            if len(entries) > 1 else text
        f.write_text(text)
        files.append(str(f))
    desc = out_dir / "pull-request.md"
    desc.write_text(description)
    files.append(str(desc))
    return tuple(files)


def apply_required(label_dir, topics, topic, rel, tree, say):
    """The port series of ``topics`` (folders of ``label_dir``), which the
    series ``rel`` of ``topic`` requires (``Requires:``), applied to
    ``tree`` with strict git am in order; [(topic, patch count)].  A
    required series that is not there or does not apply is a usage error
    naming it (export it first)."""
    done = []
    for t in topics:
        d = Path(label_dir) / t
        if t == topic or not (d / "series").is_file():
            raise UsageError(f"{rel}: 'Requires: {t}' names no port series in {label_dir}",
                             hint="name the topic whose port series this one applies on (tools/stack.py lint)")
        req = ports.load(d)
        for p in req.patches:
            say(f"git am (required {req.rel}) {p.index}/{len(req.patches)} {p.name}")
            failure = builder.apply_patch(tree, p, len(req.patches))
            if failure:
                raise UsageError(f"{req.rel}/{p.name}, which {rel} requires, does not apply with strict git am:"
                                 f"\n{builder.format_failure(failure)}",
                                 hint=f"tools/stack.py export --topic {t} --onto ... names why; fix that series "
                                      "first")
        done.append((t, len(req.patches)))
    return done


def export_port(root, lock, port, onto, out_dir, cache=None, progress=None, run_tests=True, test_python=None,
                write=True):
    """A ported series: strict git am onto the upstream's prepared tree (the
    one rebase prepares; with the port series it ``Requires:`` applied
    first), then every patch's evidence run before/after and the
    upstream-style tests on pristine/patched; the mails and pull-request.md
    only when all of it holds and ``write``."""
    say = progress or (lambda m: None)
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-export-"))
    try:
        tree = tmp / "tree"
        say(f"preparing upstream {onto.label}")
        base = new_base(lock, onto, tree, cache, progress)
        gitcmd.run(tree, "checkout", "--quiet", "-b", "patched")
        total = len(port.patches)
        label = ports.label_of(onto) if onto.version else base["base_commit"][:12]
        required = apply_required(port.dir.parent, ports.requires(port), port.topic, port.rel, tree, say)
        if required:       # the state every "before" starts from names what it holds
            label += "".join(f" + {t} port ({n})" for t, n in required)
        out = {"topic": port.topic, "onto": onto.label, "label": label, "port": port.rel, "base": base}
        if required:
            out["requires"] = tuple({"topic": t, "patches": n} for t, n in required)
        commits = [gitcmd.head(tree)]
        entries = []
        for p in port.patches:
            say(f"git am {p.index}/{total} {p.name}")
            entry = PortPatch(p.name, p.index, p.subject, p.topic, tuple(ports.ports_of(p)),
                              tuple(Dropped(n, r) for n, r in ports.dropped_in(p)), Status.APPLIED)
            failure = builder.apply_patch(tree, p, total)
            if failure:
                entries.append(dataclasses.replace(entry, status=Status.CONFLICT, failure=failure))
                return ExportReport(**out, patches=tuple(entries), status=ExportStatus.DOES_NOT_APPLY)
            commits.append(gitcmd.head(tree))
            entries.append(dataclasses.replace(entry, commit=commits[-1], text=format_patch(tree, commits[-1])))
        if run_tests:
            ev = evidence.run_series(root, tree, port, commits, label, progress, test_python)
            entries = [dataclasses.replace(entry, evidence=e) for entry, e in zip(entries, ev["patches"])]
            out["upstream_tests"] = tuple(ev["upstream_tests"])
            failed = [t["node"] for e in ev["patches"] for t in e["tests"]
                      if t["verdict"] == evidence.Verdict.FAILS_PATCHED]
            failed += [u["file"] for u in ev["upstream_tests"] if u["verdict"] == evidence.Verdict.FAILS_PATCHED]
            out["warnings"] = tuple(_warnings(ev))
            if failed:
                return ExportReport(**out, patches=tuple(entries), failed=tuple(failed),
                                    status=ExportStatus.TESTS_FAIL)
        out["patches"] = tuple(entries)
        if not write:
            return ExportReport(**out, status=ExportStatus.CHECKED)
        files = write_mails(out_dir, entries, port_description(port, out, run_tests))
        return ExportReport(**out, status=ExportStatus.EXPORTED, files=files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _warnings(ev):
    """What the evidence does not show, in words (never hidden)."""
    w = [f"{e['patch']}: {t['node']} does not fail on pristine (before: {t['before']})"
         for e in ev["patches"] for t in e["tests"] if t["verdict"] == evidence.Verdict.DOES_NOT_FAIL]
    w += [f"{u['file']}: does not fail on pristine" for u in ev["upstream_tests"]
          if u["verdict"] == evidence.Verdict.DOES_NOT_FAIL]
    w += [f"{u['file']}: not run here, the interpreter lacks module "
          f"{u['patched'].get('missing_module') or u['pristine'].get('missing_module')!r} "
          "(run the export with --test-python PY, PY having SGLang's dependencies)"
          for u in ev["upstream_tests"] if u["verdict"] == evidence.Verdict.NOT_RUN]
    return w


def _description(topic, patches, report, out):
    lines = [f"# {topic}: {len(patches)} change(s)", "",
             f"Applies onto {report.onto} ({report.base.get('base_commit', '')[:12]}).", ""]
    for p, r in zip(patches, report.patches):
        lines += [f"## {p.subject}", "", p.body, "", f"Applies: {r.status}.", ""]
    t = out.get("tests", {})
    lines += ["## Evidence", ""]
    if t.get("command"):
        lines += [f"`{t['command']}`: {t['summary']} (exit {t['exit']}).", ""]
    else:
        lines += [t.get("summary", ""), ""]
    return "\n".join(lines)


def _cell(outcome, why):
    """An outcome for a Markdown table cell, with the failure's first line."""
    return f"{outcome}: `{why.replace('`', chr(39)).replace('|', '/')}`" if why else outcome


def _run_line(side, run):
    return f"- {side}: `{run['command']}` → exit {run['exit']}: {run['summary'] or 'no output'}"


def port_description(port, out, run_tests):
    """pull-request.md of a ported series: what each patch does and why
    (its message), how it applies, and the evidence as run."""
    base = out["base"]
    n = len(port.patches)
    label = out["label"]
    lines = [f"# {port.topic}: {n} change(s) for SGLang {label}", "",
             f"Applies with `git am` (strict, no 3-way) onto {label} "
             f"({base.get('artifact') or base.get('repo', '')}; tree {base.get('tree_normalized', '')[:12]}).", ""]
    for p, e in zip(port.patches, out["patches"]):
        lines += [f"## {p.index}/{n} {p.subject}", "", p.body, ""]
    lines += ["## Evidence", ""]
    if not run_tests:
        return "\n".join(lines + ["Not run (--no-tests): this text claims nothing about tests.", ""])
    lines += [f"Every patch's tests were run on {label} with the patches before it (before) and with it "
              "(after); the `tests/...` node ids are the downstream overlay's tests of this behaviour, "
              "`--tree` the SGLang tree they test.", ""]
    for p, e in zip(port.patches, out["patches"]):
        ev = e.evidence
        lines += [f"### {p.index}/{n} {p.subject}", ""]
        if not ev["tests"]:
            lines += ["No evidence tests named (`Evidence:`).", ""]
            continue
        lines += ["| test | before | after | verdict |", "|---|---|---|---|"]
        lines += [f"| `{t['node']}` | {_cell(t['before'], t['before_reason'])} | "
                  f"{_cell(t['after'], t['after_reason'])} | {t['verdict']} |" for t in ev["tests"]]
        lines += ["", _run_line("before", ev["runs"]["before"]), _run_line("after", ev["runs"]["after"]), ""]
    uts = out.get("upstream_tests") or []
    lines += ["### Upstream-style tests", ""]
    if not uts:
        lines += ["The series adds no test file under `test/`.", ""]
    else:
        lines += [f"Run as a reviewer would, at the root of an SGLang tree with `python/` importable: {label} "
                  "with the file copied in (pristine), and with the series applied (patched).", "",
                  "| file | added by | pristine | patched | verdict |", "|---|---|---|---|---|"]
        for u in uts:
            cells = []
            for side in ("pristine", "patched"):
                r = u[side]
                why = f", lacks `{r['missing_module']}`" if r.get("missing_module") else ""
                cells.append(f"{r['outcome']} (exit {r['exit']}: {r['summary'] or 'no output'}{why})")
            lines.append(f"| `{u['file']}` | {u['index']}/{n} | {cells[0]} | {cells[1]} | {u['verdict']} |")
        lines += [""] + [f"- `{u['patched']['command']}`" for u in uts] + [""]
    if out.get("warnings"):
        lines += ["### Not shown by this evidence", ""] + [f"- {w}" for w in out["warnings"]] + [""]
    return "\n".join(lines)
