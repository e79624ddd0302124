"""Changes of the interpreter's state for the block of a ``with`` statement,
each undone when the block ends (also when it raises).

The harness's child interpreter (``child/__main__.py``) is the isolation boundary of a
run: it sizes one scenario and exits.  Inside it the harness still makes each
change to shared state (a module's attribute, ``sys.modules``) through one of
these, so that every step says what it changes and can be shown to undo it.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterable, Iterator, Mapping

_ABSENT = object()


@contextlib.contextmanager
def attributes(changes: Iterable[tuple[object, str, object]]) -> Iterator[None]:
    """Set each ``(owner, name, value)`` (an owner is a module or a class) for
    the block; at its end every attribute is put back as the owner itself held
    it (set again, or deleted where it held none), in the reverse order of the
    changes."""
    saved: list[tuple[object, str, object]] = []
    try:
        for owner, name, value in changes:
            saved.append((owner, name, vars(owner).get(name, _ABSENT)))
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is _ABSENT:
                with contextlib.suppress(AttributeError):
                    delattr(owner, name)
            else:
                setattr(owner, name, old)


@contextlib.contextmanager
def modules(entries: Mapping[str, types.ModuleType]) -> Iterator[None]:
    """``sys.modules`` holds ``entries`` for the block; at its end each name
    holds what it held before, or nothing."""
    saved = {name: sys.modules.get(name, _ABSENT) for name in entries}
    try:
        sys.modules.update(entries)
        yield
    finally:
        for name, old in saved.items():
            if old is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
