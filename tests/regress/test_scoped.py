"""harness/child/scoped.py: each change of the interpreter's state holds for the
block of a ``with`` statement and is undone at its end, also when the block
raises."""

import sys
import types

import pytest

from sgl_overlay.harness.child import scoped


class Boom(Exception):
    pass


def test_attributes_set_for_the_block_then_put_back():
    mod = types.ModuleType("sglo_test_scoped")
    original = object()
    mod.kept = original
    with scoped.attributes([(mod, "kept", 1), (mod, "added", 2)]):
        assert (mod.kept, mod.added) == (1, 2)
    assert mod.kept is original
    assert not hasattr(mod, "added")  # it had none: deleted, not left as None


def test_attributes_put_back_when_the_block_raises():
    mod = types.ModuleType("sglo_test_scoped")
    mod.kept = "before"
    with pytest.raises(Boom), scoped.attributes([(mod, "kept", "during")]):
        assert mod.kept == "during"
        raise Boom
    assert mod.kept == "before"


def test_attributes_changed_twice_end_as_they_began():
    """Undone in reverse order: the first change's saved value is the last put back."""
    mod = types.ModuleType("sglo_test_scoped")
    mod.x = "first"
    with scoped.attributes([(mod, "x", "second"), (mod, "x", "third")]):
        assert mod.x == "third"
    assert mod.x == "first"


def test_attributes_of_a_class_leave_the_inherited_one_visible():
    class Base:
        def rule(self):
            return "base"

    class Sub(Base):
        pass

    with scoped.attributes([(Sub, "rule", lambda self: "traced")]):
        assert Sub().rule() == "traced"
    assert "rule" not in vars(Sub)  # the subclass owned none: deleted again
    assert Sub().rule() == "base"


def test_modules_in_sys_modules_for_the_block_only():
    name = "sglo_test_scoped_module"
    assert name not in sys.modules
    shadowed = sys.modules["json"]
    stand_in, json_stand_in = types.ModuleType(name), types.ModuleType("json")
    with pytest.raises(Boom), scoped.modules({name: stand_in, "json": json_stand_in}):
        assert sys.modules[name] is stand_in
        assert sys.modules["json"] is json_stand_in
        raise Boom
    assert name not in sys.modules
    assert sys.modules["json"] is shadowed
