"""The stack's lifecycle: rebase onto a newer upstream (every patch
classified), a resumable port session onto a new release (``port``),
refresh patches/ from an edited build tree without noise, export a topic as
a clean series for an upstream pull request, lint.

Classification is a pure function of what git reported for a patch
(``classify``); everything else is I/O around the tree builder.  One module
per concept: ``classify`` (the patch statuses), ``texts`` (patch texts modulo
noise), ``rebase``, ``port`` (a package: the session's state, decisions,
store, git facts, verbs, end and report), ``refresh``, ``lint``, ``export``,
``roll``, ``ranges`` (which series a release takes), ``ports`` (the ported
series' layout and trailers), ``evidence`` (their tests, run before/after).
Every verb returns a typed result with its exit code; its JSON is derived in
one place: ``json_form`` (rebase, check, export, refresh, lint, roll) and
``port.report`` (the port session's verbs).
"""

from .classify import APPLIES, LEAVES_SERIES, RESOLVED, UNRESOLVED, Status, classify
from .export import DOWNSTREAM_TRAILERS, ExportReport, ExportStatus, PortPatch, export, strip_trailers
from .lint import LintReport, LintStatus, lint, lint_report
from .ports import coverage, mark_covered, mark_not_ported, mark_ported, not_ported_in
from .rebase import Onto, RebasedPatch, RebaseReport, Written, new_lock, rebase, write_rebase
from .refresh import Refreshed, RefreshReport, RefreshStatus, refresh, tree_commits
from .texts import format_patch, noise_free, patch_id, slug

__all__ = ["APPLIES", "DOWNSTREAM_TRAILERS", "LEAVES_SERIES", "RESOLVED", "UNRESOLVED", "ExportReport",
           "ExportStatus", "LintReport", "LintStatus", "Onto", "PortPatch", "RebaseReport", "RebasedPatch",
           "RefreshReport", "RefreshStatus", "Refreshed", "Status", "Written", "lint_report", "classify", "coverage", "export", "mark_covered", "format_patch", "lint", "mark_not_ported", "mark_ported", "new_lock", "noise_free",
           "not_ported_in", "patch_id",
           "rebase", "refresh", "slug", "strip_trailers", "tree_commits", "write_rebase"]
