"""The port session: the stack carried onto a newer upstream release patch
by patch, stopping for a person where git cannot, resumable like
``git rebase`` (``tools/stack.py port``; docs/stack.md, "Port session").

The session lives in the checkout's ``build/port/``: ``tree/`` (a git work
tree prepared as ``rebase`` prepares it: the new upstream on ``upstream``,
branch ``patched``, the old stack as ``refs/sgl-overlay/old``),
``session.json`` (the state, written atomically), ``upstream.lock.new`` (the
new lock, computed and verified at the start as ``rebase --write`` does),
and, at the end, ``stage/`` and ``range-diff.txt``.  Recorded conflict
resolutions live beside it in ``build/port-rr-cache/`` (the tree's
``.git/rr-cache`` points there), so they outlive an ``--abort`` and a
finished session and a second run of the same move reuses them.

The end writes patches/ and upstream.lock so that a kill at any instant
leaves each whole: the new patches/ is staged, the phase ``finishing`` is
recorded with the staged digests, patches/ is swapped in with one rename
exchange, the lock replaced with one rename, and the phase ``done``
recorded; ``--continue`` or ``--status`` after a kill in ``finishing``
rolls forward, judged by digests alone (``finish_steps``).

One module per concept: ``state`` (the session and its JSON: frozen
dataclasses and enums), ``decisions`` (``after_attempt``, ``continue_step``,
``skip_step``, ``finish_steps``, ``name_commits``, ``port_mails``: pure
functions of the state and of what git reported, ``TreeFacts``), ``store``
(where it lives, digests, atomic writes), ``gitfacts`` (what git reports of
the tree, rerere, the range-diff), ``session`` (the verbs), ``end`` (the
staged end put in place), ``report`` (what a verb returns).
"""

from ..refresh import Change
from .decisions import (Act, Put, Refusal, Step, TreeFacts, after_attempt, continue_step, finish_steps, name_commits,
                        next_steps, port_mails, skip_step, work_of)
from .end import roll_forward, stage_end, stage_port, swap_patches
from .gitfacts import facts, parse_range_diff, range_diff
from .report import Report
from .session import abort, continue_, refuse_running, skip, start, start_topic, status
from .state import SCHEMA, Carried, Outcome, PatchResult, Phase, RangeDiff, Resolution, Session, Staged, Stop
from .store import RR_CACHE, SESSION, Places, atomic_write, dir_digest, file_digest, load, save, write_state

__all__ = ["RR_CACHE", "SCHEMA", "SESSION", "Act", "Carried", "Change", "Outcome", "PatchResult", "Phase", "Places",
           "Put", "RangeDiff", "Refusal", "Report", "Resolution", "Session", "Staged", "Step", "Stop", "TreeFacts",
           "abort", "after_attempt", "atomic_write", "continue_", "continue_step", "dir_digest", "facts",
           "file_digest", "finish_steps", "load", "name_commits", "next_steps", "parse_range_diff", "port_mails",
           "range_diff", "refuse_running", "roll_forward", "save", "skip", "skip_step", "stage_end", "stage_port",
           "start", "start_topic", "status", "swap_patches", "work_of", "write_state"]
