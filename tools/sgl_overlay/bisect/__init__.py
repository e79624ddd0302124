"""Bisecting upstream SGLang history against a test: the range (published
releases or git commits), a pure strategy from the results so far to the
next points, the verdicts, the JSON-lines log, and running one step
(materialize the tree, pristine or with the patch stack; run the test).

One module per concept: ``terms`` (old/new/skip/abort, git bisect run's
exit protocol), ``range``, ``strategy`` (pure ``decide``), ``report``
(verdicts in words), ``log``, ``testrun`` (the test), ``tree_cache``
(trees per point and stack digest), ``runner`` (``Bisection``),
``versus_git`` (side by side with git bisect run), ``issue`` (a bug report's
text, pure) and ``evidence`` (what the report is made of, gathered).  See docs/bisect.md.
"""
from . import evidence, issue
from .log import LOG_SCHEMA, Log, known_from
from .range import Point, Range, commit_range, release_range
from .report import finish, words
from .runner import Bisection
from .strategy import Decision, cuts, decide, remaining_steps
from .terms import ABORT, NEW, OLD, SKIP, agree, classify, term_of
from .testrun import TAIL, Children, Test, TestRun
from .tree_cache import StepSkip, TreeCache, Trees

__all__ = ["ABORT", "LOG_SCHEMA", "NEW", "OLD", "SKIP", "TAIL", "Bisection", "Children", "Decision", "Log",
           "Point", "Range", "StepSkip", "Test", "TestRun", "TreeCache", "Trees", "agree", "classify",
           "commit_range", "cuts", "decide", "evidence", "finish", "issue", "known_from", "release_range", "remaining_steps",
           "term_of", "words"]
