"""An exception raised in the child, as the protocol's error record (``protocol.ErrorRecord``): what it
was (``ErrorKind``) and where it came from (``Origin``).  Runs in the child only: it reads the stand-ins
the loader handed out."""

from __future__ import annotations

import linecache
import traceback
from pathlib import Path

from ...extras import third_party_missing
from ..protocol import ErrorKind, ErrorRecord, Origin
from . import loader
from .drivers import Untestable
from .standins import MissingInput


def _origin(frame, root_s: str) -> Origin:
    if frame is None:
        return Origin.HARNESS
    if frame.filename.startswith(root_s):
        return Origin.TREE
    if "<sglang stand-in" in frame.filename or Path(frame.filename) == Path(loader.__file__):
        return Origin.STANDIN
    return Origin.HARNESS


def _kind(e: BaseException) -> ErrorKind:
    if isinstance(e, MissingInput):
        return ErrorKind.MISSING_INPUT
    if isinstance(e, Untestable):
        return ErrorKind.UNTESTABLE
    if isinstance(e, ModuleNotFoundError) and third_party_missing(e.name):
        return ErrorKind.ENVIRONMENT  # a package missing here, not a property of the tree
    if isinstance(e, ImportError):
        return ErrorKind.IMPORT
    return ErrorKind.EXCEPTION


def record_of(e: BaseException, root: Path) -> ErrorRecord:
    """The error record of an exception raised while driving the tree at ``root``."""
    tb = traceback.extract_tb(e.__traceback__)
    root_s = str(Path(root).resolve())
    in_tree = [f for f in tb if f.filename.startswith(root_s)]
    last = tb[-1] if tb else None
    origin = _origin(last, root_s)
    raise_stmt = origin is Origin.TREE and linecache.getline(last.filename, last.lineno).strip().startswith("raise")
    where = None
    if in_tree:
        f = in_tree[-1]
        where = f"{Path(f.filename).relative_to(root_s)}:{f.lineno} ({f.name})"
    text = str(e)
    stub_involved = "stand-in" in text or "_StubMeta" in text or "_StubInstance" in text
    if not stub_involved:
        short = {n.rsplit(".", 1)[-1] for n in loader.StubRegistry.touched}
        stub_involved = any(f"'{n}'" in text for n in short)
    kind = _kind(e)
    return ErrorRecord(
        type=type(e).__name__, message=text, kind=kind, origin=origin, where=where,
        mro=tuple(c.__name__ for c in type(e).__mro__),
        package=third_party_missing(e.name) if kind is ErrorKind.ENVIRONMENT else None,
        stub_involved=stub_involved, raise_statement=raise_stmt,
        traceback="".join(traceback.format_exception(e))[-4000:],
        standins_touched_sample=tuple(sorted(loader.StubRegistry.touched)[-10:]) if stub_involved else ())


def describe_exception(e: BaseException, root: Path) -> dict:
    """The error record of ``e`` as the child writes it (JSON)."""
    return record_of(e, root).to_json()
