"""tools/gpu/e2e.py's import-only stand-ins (STUBS, _stubs): written only for what neither the
machine (the interpreter that runs e2e and the servers) nor the bundle's installed wheels have;
the xgrammar one serves where v0.5.16 uses xgrammar.StructuralTag at start: a pydantic field type
of the OpenAI protocol's request models (sglang/srt/entrypoints/openai/protocol.py, read here from
the cached release wheel)."""
import ast
import importlib.machinery
import importlib.util
import typing
import zipfile

import pydantic
import pytest

from sgl_overlay import artifacts
from tests.by_path import load
from tests.gpu.e2e_script import e2e_install

NAMES = ("IPython", "soundfile", "xgrammar")


@pytest.fixture
def machine(monkeypatch):
    """The machine's packages: ``machine(*names)`` makes importlib find those of NAMES (and no other of
    them) for e2e's check; every other module is found as before."""
    real = importlib.util.find_spec

    def set_(*present):
        def find_spec(name, *a, **k):
            if name in NAMES:
                return importlib.machinery.ModuleSpec(name, None) if name in present else None
            return real(name, *a, **k)
        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return set_


def test_every_stand_in_is_written_for_a_bare_machine_and_bundle(tmp_path, machine):
    machine()
    (tmp_path / "deps").mkdir()
    assert e2e_install._stubs(tmp_path) == list(NAMES)
    assert sorted(str(p.relative_to(tmp_path / "stubs")) for p in (tmp_path / "stubs").rglob("*.py")) == [
        "IPython/__init__.py", "IPython/display.py", "soundfile.py", "xgrammar.py"]


def test_a_package_the_machine_or_the_bundle_has_gets_no_stand_in(tmp_path, machine):
    machine("IPython")                                    # on the machine
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "soundfile.py").write_text("")   # installed from the bundle (the wheel's top-level module)
    assert e2e_install._stubs(tmp_path) == ["xgrammar"]
    assert [p.name for p in (tmp_path / "stubs").iterdir()] == ["xgrammar.py"]


def test_no_stand_in_and_no_stubs_folder_when_everything_is_there(tmp_path, machine):
    machine(*NAMES)
    assert e2e_install._stubs(tmp_path) == []
    assert not (tmp_path / "stubs").exists()


def _protocol_0_5_16(structural_tag):
    """The response-format models of v0.5.16's protocol.py and the `response_format` field of its
    ChatCompletionRequest, executed with ``structural_tag`` as xgrammar.StructuralTag."""
    wheel = artifacts.release("0.5.16", tags="cp311-cp311-manylinux_2_34_x86_64").path
    with zipfile.ZipFile(wheel) as z:
        text = z.read("sglang/srt/entrypoints/openai/protocol.py").decode()
    tree = ast.parse(text)
    wanted = {"JsonSchemaResponseFormat", "ResponseFormat", "StructuresResponseFormat",
              "LegacyStructuralTagResponseFormat", "StructuralTagResponseFormat"}
    parts = [ast.get_source_segment(text, n) for n in tree.body
             if getattr(n, "name", None) in wanted
             or (isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) in wanted)]
    request = next(n for n in tree.body if getattr(n, "name", None) == "ChatCompletionRequest")
    field = next(n for n in request.body if isinstance(n, ast.AnnAssign) and n.target.id == "response_format")
    parts.append("class Request(BaseModel):\n    " + ast.get_source_segment(text, field))
    assert len(parts) == 6
    ns = {**{n: getattr(typing, n) for n in typing.__all__}, "BaseModel": pydantic.BaseModel,
          "Field": pydantic.Field, "StructuralTag": structural_tag}
    exec("\n\n".join(parts), ns)      # noqa: S102 - the release's own class definitions
    return ns


def test_the_xgrammar_stand_in_is_a_pydantic_field_type_of_the_releases_requests(tmp_path, machine):
    machine()
    e2e_install._stubs(tmp_path)
    standin = load(tmp_path / "stubs" / "xgrammar.py", "xgrammar_standin").StructuralTag
    ns = _protocol_0_5_16(standin)
    # a structural_tag response format as inkling_detector builds one (StructuralTag.model_validate)
    tag = {"type": "structural_tag", "format": {"type": "token_triggered_tags", "trigger_tokens": [7],
                                                "tags": [{"type": "tag", "begin": {"type": "token", "token": 7}}]}}
    r = ns["Request"](response_format=tag)
    assert isinstance(r.response_format, standin) and r.response_format.model_dump() == tag
    assert standin.model_validate(tag).model_dump() == tag
    assert isinstance(ns["Request"](response_format={"type": "json_object"}).response_format, ns["ResponseFormat"])
    ns["Request"].model_json_schema()          # what FastAPI does with the route's models at start


def test_a_plain_class_would_not_serve_as_that_field_type():
    class StructuralTag:      # what an import-only stand-in without pydantic would be
        pass
    with pytest.raises(pydantic.errors.PydanticSchemaGenerationError):
        _protocol_0_5_16(StructuralTag)
