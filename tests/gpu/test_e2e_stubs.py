"""tools/gpu/e2e.py's import-only stand-ins (STUBS, _stubs): written only for what neither the
machine (the interpreter that runs e2e and the servers) nor the bundle's installed wheels have;
the xgrammar one serves where v0.5.16 uses xgrammar.StructuralTag at start: a pydantic field type
of the OpenAI protocol's request models (sglang/srt/entrypoints/openai/protocol.py, read here from
the cached release wheel), and where v0.5.17's start imports the structural tag's formats."""
import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import typing
import zipfile

import pydantic
import pytest

from sgl_overlay import artifacts
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
        "IPython/__init__.py", "IPython/display.py", "soundfile.py", "xgrammar/__init__.py",
        "xgrammar/structural_tag.py"]


def test_a_package_the_machine_or_the_bundle_has_gets_no_stand_in(tmp_path, machine):
    machine("IPython")                                    # on the machine
    (tmp_path / "deps").mkdir()
    (tmp_path / "deps" / "soundfile.py").write_text("")   # installed from the bundle (the wheel's top-level module)
    assert e2e_install._stubs(tmp_path) == ["xgrammar"]
    assert [p.name for p in (tmp_path / "stubs").iterdir()] == ["xgrammar"]


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


@pytest.fixture
def xgrammar_standin(tmp_path, machine, monkeypatch):
    """The xgrammar stand-in as the servers import it: its folder first on sys.path."""
    machine()
    e2e_install._stubs(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "stubs"))
    for m in ("xgrammar", "xgrammar.structural_tag"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    return importlib.import_module("xgrammar")


def test_the_xgrammar_stand_in_is_a_pydantic_field_type_of_the_releases_requests(xgrammar_standin):
    standin = xgrammar_standin.StructuralTag
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


def _xgrammar_imports(version):
    """``{module: {name, ...}}``: what the release's own modules import by name from xgrammar and its
    submodules at module level (its wheel, read with ast)."""
    wheel = artifacts.release(version, tags="cp311-cp311-manylinux_2_34_x86_64").path
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if n.startswith("sglang/srt/function_call/") and n.endswith(".py"):
                for node in ast.parse(z.read(n)).body:
                    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "xgrammar":
                        out.setdefault(node.module, set()).update(a.name for a in node.names)
    return out


def test_the_xgrammar_stand_in_has_every_name_v0_5_17s_function_call_parsers_import(xgrammar_standin):
    """v0.5.17's kimik3_structural_tag.py imports fifteen names (Format and its kinds) from xgrammar.structural_tag at
    module level (its inkling and kimik3 detectors StructuralTag): each is there, a pydantic model."""
    wanted = _xgrammar_imports("0.5.17")
    assert set(wanted) == {"xgrammar", "xgrammar.structural_tag"}
    assert wanted["xgrammar"] == {"StructuralTag"}
    assert {"Format", "TagFormat", "JSONSchemaFormat", "TriggeredTagsFormat"} <= wanted["xgrammar.structural_tag"]
    assert len(wanted["xgrammar.structural_tag"]) == 15
    for module, names in wanted.items():
        m = importlib.import_module(module)
        for name in names:
            cls = getattr(m, name)
            assert issubclass(cls, pydantic.BaseModel) and cls.__name__ == name
            assert cls.model_validate({"type": "x"}).model_dump() == {"type": "x"}
    assert getattr(importlib.import_module("xgrammar.structural_tag"), "Format") is \
        importlib.import_module("xgrammar.structural_tag").Format       # made once


def test_v0_5_16_imports_only_what_the_stand_in_had_then():
    assert _xgrammar_imports("0.5.16") == {"xgrammar": {"StructuralTag"}}
