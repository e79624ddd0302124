"""Bisecting upstream SGLang history against a test: the range (published
releases or git commits), a pure strategy from the results so far to the
next points, the verdicts, the JSON-lines log, and running one step
(materialize the tree, pristine or with the patch stack; run the test).

One module per concept: ``terms`` (raw results and old/new/skip/abort,
git bisect run's exit protocol), ``range`` (``ReleaseRange``,
``CommitRange``), ``strategy`` (pure ``decide``), ``verdict`` (the answer,
its record and its words), ``log``, ``testrun`` (``ScenarioTest``,
``CommandTest``), ``tree_cache`` (trees per point and stack digest),
``runner`` (``Bisection``), ``issue`` (a bug report's text, pure) and
``evidence`` (what the report is made of, gathered).  See docs/bisect.md.
"""
from . import evidence, issue
from .log import LOG_SCHEMA, Log, Result, known_from
from .range import CommitRange, Point, Range, RangeKind, ReleaseRange, commit_range, release_range
from .runner import Bisection
from .strategy import Decision, Phase, cuts, decide, remaining_steps
from .terms import ABORT, NEW, OLD, SKIP, Raw, Term, agree
from .testrun import TAIL, Children, CommandTest, ScenarioTest, StepTest, Test, TestRun
from .tree_cache import StepSkip, TreeCache, Trees
from .verdict import Answer, Record, Verdict

__all__ = ["ABORT", "LOG_SCHEMA", "NEW", "OLD", "SKIP", "TAIL", "Answer", "Bisection", "Children", "CommandTest",
           "CommitRange", "Decision", "Log", "Phase", "Point", "Range", "RangeKind", "Raw", "Record", "ReleaseRange",
           "Result", "ScenarioTest", "StepSkip", "StepTest", "Term", "Test", "TestRun", "TreeCache", "Trees", "Verdict",
           "agree", "commit_range", "cuts", "decide", "evidence", "issue", "known_from", "release_range",
           "remaining_steps"]
