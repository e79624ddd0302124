"""Lint: every problem with the stack."""
from pathlib import Path

from .. import series
from ..errors import UsageError


def lint(root):
    """Every problem with the stack, as dicts (patch, field, error, hint)."""
    root = Path(root)
    problems = []
    try:
        stack = series.load(root, strict=False)
    except UsageError as e:
        return [{"patch": None, "field": "series", "error": e.message, "hint": e.hint}]
    for p in stack.patches:
        for field, message, hint in series.lint(p):
            problems.append({"patch": p.name, "field": field, "error": message, "hint": hint})
        for pf in p.patchset:
            for h in pf:
                for line in h:
                    if line.is_added and line.value.rstrip("\n") != line.value.rstrip():
                        problems.append({"patch": p.name, "field": "whitespace",
                                         "error": f"patches/{p.name}: trailing whitespace in an added line "
                                                  f"of {pf.path} (line {line.target_line_no})",
                                         "hint": "strip it in the tree and refresh"})
                        break
        if p.topic == "debug" and not p.upstream_status.startswith("Inappropriate"):
            problems.append({"patch": p.name, "field": "Upstream-Status",
                             "error": f"patches/{p.name}: the debug topic is marked {p.upstream_status!r}",
                             "hint": "debug instrumentation is not for upstream: "
                                     "Upstream-Status: Inappropriate [debug instrumentation]"})
    return problems
