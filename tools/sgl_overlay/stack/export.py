"""Export: a topic's patches alone on an upstream, verified, as numbered
mails plus a pull-request description."""
import dataclasses
import enum
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import series
from ..errors import UsageError
from .classify import APPLIES
from .rebase import rebase
from .texts import slug

DOWNSTREAM_TRAILERS = ("Topic", "Upstream-Status")


class ExportStatus(enum.StrEnum):
    """The outcome of an export (its value is the report's word)."""
    EXPORTED = "exported"
    DOES_NOT_APPLY = "does-not-apply"
    TESTS_FAIL = "tests-fail"


def strip_trailers(text):
    """Remove this project's downstream-only trailers from a mail."""
    head, sep, rest = text.partition("\n---\n")
    head = re.sub(r"(?m)^(%s): .*(\n|\Z)" % "|".join(DOWNSTREAM_TRAILERS), "", head)
    return re.sub(r"\n\n+\Z", "\n", head.rstrip("\n") + "\n") + sep + rest if sep else head


def export(root, lock, topic, onto, out_dir, cache=None, progress=None, run_tests=True):
    """The topic's patches alone on ``onto``: verified to apply and to pass
    the topic's tests there, written as numbered mails plus a pull-request
    description."""
    say = progress or (lambda m: None)
    root = Path(root)
    stack = series.load(root)
    mine = [p for p in stack.patches if p.topic == topic]
    if not mine:
        topics = sorted({p.topic for p in stack.patches})
        raise UsageError(f"no patch has Topic: {topic}", hint=f"topics in the stack: {', '.join(topics) or 'none'}")
    inappropriate = [p.name for p in mine if p.upstream_status.startswith("Inappropriate")]
    if inappropriate:
        raise UsageError(f"topic {topic!r} is marked Upstream-Status: Inappropriate ({inappropriate[0]})",
                         hint="it is downstream-only and is not exported")
    sub = dataclasses.replace(stack, patches=[dataclasses.replace(p, index=i) for i, p in enumerate(mine, 1)],
                              overlay=[])
    tmp = Path(tempfile.mkdtemp(prefix="sgl-overlay-export-"))
    try:
        tree = tmp / "tree"
        report = rebase(lock, sub, onto, cache, progress, keep=tree)
        out = {"topic": topic, "onto": onto.label, "patches": report["patches"], "files": []}
        bad = [r for r in report["patches"] if r["status"] not in APPLIES]
        if bad:
            out["status"] = ExportStatus.DOES_NOT_APPLY
            return out
        tests = root / "tests" / topic
        if run_tests and tests.is_dir():
            say(f"running tests/{topic} against the exported tree")
            p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                                "--tree", str(tree)], capture_output=True, text=True, cwd=root)
            last = (p.stdout.strip().splitlines() or [""])[-1]
            out["tests"] = {"command": f"python -m pytest tests/{topic} --tree <exported tree>",
                            "exit": p.returncode, "summary": last}
            if p.returncode:
                out["status"] = ExportStatus.TESTS_FAIL
                return out
        else:
            out["tests"] = {"summary": f"no tests/{topic} folder" if run_tests else "not run"}
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for i, r in enumerate(report["patches"], 1):
            f = out_dir / f"{i:04d}-{slug(r['subject'])}.patch"
            text = strip_trailers(r["text"])
            text = text.replace("Subject: [PATCH] ", f"Subject: [PATCH {i}/{len(mine)}] ", 1) \
                if len(mine) > 1 else text
            f.write_text(text)
            out["files"].append(str(f))
        desc = out_dir / "pull-request.md"
        desc.write_text(_description(topic, mine, report, out))
        out["files"].append(str(desc))
        out["status"] = ExportStatus.EXPORTED
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _description(topic, patches, report, out):
    lines = [f"# {topic}: {len(patches)} change(s)", "",
             f"Applies onto {report['onto']} ({report['base'].get('base_commit', '')[:12]}).", ""]
    for p, r in zip(patches, report["patches"]):
        lines += [f"## {p.subject}", "", p.body, "", f"Applies: {r['status']}.", ""]
    t = out.get("tests", {})
    lines += ["## Evidence", ""]
    if t.get("command"):
        lines += [f"`{t['command']}`: {t['summary']} (exit {t['exit']}).", ""]
    else:
        lines += [t.get("summary", ""), ""]
    return "\n".join(lines)
