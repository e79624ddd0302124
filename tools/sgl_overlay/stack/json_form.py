"""The JSON form of the stack verbs' typed results, derived in one place.

A result is a dataclass; its JSON is its fields by name, enums as their
words, paths as POSIX text, tuples as lists.  A field declared with
``optional()`` is left out of the JSON while it is None (the key is absent,
as the verbs' ``--json`` has always written it); one declared with
``hidden()`` never appears (e.g. a patch's whole mail text).  A value with
a ``to_json`` method of its own (``ranges.Choice``, the port session's
state) is written as that method gives it."""
import dataclasses
import enum
from pathlib import Path

_JSON = "json"
_OMIT_NONE = "omit-none"
_HIDDEN = "hidden"


def optional(default=None):
    """A field absent from the JSON while it is None."""
    return dataclasses.field(default=default, metadata={_JSON: _OMIT_NONE})


def hidden(default=None):
    """A field the JSON never shows."""
    return dataclasses.field(default=default, metadata={_JSON: _HIDDEN}, repr=False)


class Result:
    """A typed result: ``to_json()`` is ``json_of(self)``."""

    def to_json(self):
        return json_of(self)


def fields_json(value):
    """The JSON object of a dataclass's fields (the rules above)."""
    out = {}
    for f in dataclasses.fields(value):
        rule = f.metadata.get(_JSON)
        v = getattr(value, f.name)
        if rule == _HIDDEN or (rule == _OMIT_NONE and v is None):
            continue
        out[f.name] = json_of(v)
    return out


def json_of(value):
    """The JSON form of ``value`` (a result, or anything inside one)."""
    if isinstance(value, Result):
        return fields_json(value)
    if callable(getattr(value, "to_json", None)):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_json(value)
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, Path):
        return value.as_posix()
    if isinstance(value, (list, tuple)):
        return [json_of(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_of(v) for k, v in value.items()}
    return value
