"""The release's own flag resolution: its ``ServerArgs`` construction, run on
the scenario's flags, with only the hardware probes answered from the scenario.

``resolve(ctx, model_config)`` builds the tree's real ``ServerArgs`` dataclass
(its ``__init__``, then its ``__post_init__`` and every rule method that calls,
in the release's own order; from v0.5.23 ``resolve_once`` and its resolution
pipeline).  What the harness answers, and nothing else:

* the hardware probes, from the scenario's ``[gpu]`` table: ``torch.cuda``'s
  ``is_available`` / ``device_count`` / ``get_device_capability`` /
  ``get_device_name`` / ``get_device_properties`` / ``mem_get_info`` and
  ``torch.version.cuda`` (patched only while the rules run), and
  ``get_device_memory_capacity`` / ``get_nvgpu_memory_capacity`` (nvidia-smi);
  the tree's own probe helpers (``is_cuda``, ``get_device_sm``,
  ``is_sm100_supported`` ...) run on those answers (``loader.definitions``);
* the model: ``get_model_config()`` returns the harness's model-config view,
  ``get_config(path)`` the scenario's HF config (target or drafter).

Every rule that changes a field is recorded: ``changes`` lists
``{"flag", "given", "resolved", "rule"}`` for each field whose final value
differs from what the scenario gave (its value right after ``__init__``).
The rule is the innermost release method or hook (``ServerArgs._handle_x``,
``arg_groups.speculative_hook._handle_dflash``) during which the field changed,
or the ``source`` a v0.5.19+ rule names through ``declare_resolution``.

Each answer is a named step that holds only while the release's constructor
and rules run (``model_directory``, ``standins_answered``, ``hooks_traced``,
``loader.registered_fakes``, ``torch_cuda_answers``: ``resolve`` composes them
with a ``contextlib.ExitStack``), undone also when the release refuses.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import dataclasses
import functools
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import torch

from . import loader, scoped
from .drivers.context import Untestable
from ..flag_renames import renamed
from ..scenario_tables import GpuTable
from .release_parser import FlagError, argv_of, build
from .standins import MissingInput, missing_scenario_keys

MIB = 1 << 20

# The probe helpers of sglang/srt/utils/common.py run from the tree on the
# patched torch.cuda answers (their own code, not a restatement).
PROBES = (
    "is_cuda", "is_hip", "is_npu", "is_xpu", "is_cpu", "is_mps", "is_musa", "is_hpu", "is_cuda_alike",
    "get_device_sm", "get_device_name", "get_device_capability", "get_device", "get_device_count",
    "is_sm90_supported", "is_sm100_supported", "is_sm120_supported", "is_blackwell_supported",
    "is_hopper_with_cuda_12_3", "is_host_cpu_arm64", "cpu_has_amx_support", "xpu_has_xmx_support",
    "is_blackwell", "is_sm80_supported", "is_sm100_or_sm110_supported",
)
# Pure helpers of the same file the rules call on the server args themselves:
# as stand-ins they answered falsy, so the default attention backend missed
# trtllm_mha on SM100 (and fa3 on Hopper), and trtllm_mha's page size 64 with it
# (docs/results/regress.md, "A second harness fault these logs found").
RULE_HELPERS = ("is_no_spec_infer_or_topk_one",)


# the [gpu] keys the probes answer from, with an H200's values as the example a message shows
DEVICE_EXAMPLE = {"device_name": "NVIDIA H200", "capability": [9, 0], "total_mib": 143771}


@dataclasses.dataclass(frozen=True)
class Hardware:
    """The scenario's device, as the probes report it."""

    name: str
    capability: tuple
    total_mib: int | None
    count: int
    cuda: str = "12.9"

    @classmethod
    def of(cls, gpu: GpuTable, world_size: int) -> "Hardware":
        """From a scenario's [gpu] table.  Each of device_name, capability and
        total_mib must be present; an explicit null (the planner without --gpu)
        is a device the probes cannot name: name "", capability (0, 0), no
        memory figure (the release's own "gpu_mem is None" branches)."""
        missing = [k for k in DEVICE_EXAMPLE if k not in gpu]
        if missing:
            raise missing_scenario_keys("gpu", missing, DEVICE_EXAMPLE,
                                        "the release's flag rules probe the device's name, compute "
                                        "capability and memory")
        cap = gpu.capability
        return cls(str(gpu.device_name or ""), tuple(int(x) for x in cap) if cap else (0, 0),
                   int(gpu.total_mib) if gpu.total_mib is not None else None,
                   world_size if gpu.gpu_count is None else gpu.gpu_count, gpu.cuda)


def torch_cuda_answers(hw: Hardware, free_bytes: int):
    """torch.cuda's probes (and ``torch.version.cuda``) answer the scenario's
    device, for the block of a ``with`` statement only."""
    total = (hw.total_mib or 0) * MIB
    props = types.SimpleNamespace(name=hw.name, major=hw.capability[0], minor=hw.capability[1],
                                  total_memory=total, multi_processor_count=0)
    fakes = dict(
        is_available=lambda: True,
        device_count=lambda: hw.count,
        get_device_capability=lambda *a, **k: hw.capability,
        get_device_name=lambda *a, **k: hw.name,
        get_device_properties=lambda *a, **k: props,
        mem_get_info=lambda *a, **k: (free_bytes, total),
        current_device=lambda: 0,
    )
    return scoped.attributes([(torch.cuda, k, v) for k, v in fakes.items()] + [(torch.version, "cuda", hw.cuda)])


def _code_cache(path: Path, key: tuple, build):
    """``build()`` for the tree file ``path``, kept on disk (code_cache.cached),
    so a run does not parse a large module (utils/common.py,
    configs/model_config.py) again."""
    from .code_cache import cached

    return cached(path, key, build)


def tree_functions(path: Path, wanted, ns: dict, skip=()) -> dict:
    """As ``_tree_function_code``, defined in a namespace of their own."""
    imports, body, seen = _code_cache(path, ("functions", tuple(sorted(wanted)), tuple(sorted(skip))),
                                      lambda: _tree_function_code(path, wanted, skip))
    glb = {"__name__": "tree." + path.stem}
    for top, code in imports:  # the file's own imports of the standard library (and of what is loaded)
        if all(t in sys.stdlib_module_names or t in sys.modules for t in top):
            try:
                exec(code, glb)
            except Exception:  # noqa: BLE001
                pass
    glb.update(ns)
    for code in body:  # in file order, one at a time: one that fails to define is skipped
        try:
            exec(code, glb)
        except Exception:  # noqa: BLE001
            pass
    return {n: glb[n.replace(".", "__")] for n in seen if n.replace(".", "__") in glb}


def _tree_function_code(path: Path, wanted, skip=()) -> tuple:
    """(imports, statements, names): the compiled top-level functions ``wanted``
    of a tree's file and the top-level functions and constants they use, in
    file order, and the file's imports of other packages than sglang."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    defs = {}
    for n in list(tree.body):
        if isinstance(n, ast.ClassDef):  # wanted "Class.method": the method, as a plain function
            for m in n.body:
                if isinstance(m, ast.FunctionDef) and f"{n.name}.{m.name}" in wanted:
                    fn = copy.deepcopy(m)
                    fn.name = f"{n.name}__{m.name}"
                    fn.decorator_list = []
                    defs[f"{n.name}.{m.name}"] = fn
                    tree.body.append(fn)
        if isinstance(n, ast.FunctionDef):
            defs[n.name] = n
        elif isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) for t in n.targets):
            for t in n.targets:
                defs.setdefault(t.id, n)
    want, seen = [n for n in wanted if n in defs], set()
    while want:
        name = want.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(defs[name]):
            if isinstance(node, ast.Name) and node.id in defs and node.id not in seen and node.id not in skip:
                want.append(node.id)
    imports = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            tops = [(node.module or "").split(".")[0]] if isinstance(node, ast.ImportFrom) \
                else [a.name.split(".")[0] for a in node.names]
            if all(t and t != "sglang" for t in tops):
                imports.append((tops, compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")))
    chosen = {id(defs[n]) for n in seen}
    body = [compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            for node in tree.body if id(node) in chosen]
    return imports, body, sorted(seen)


def _probe_closure(root: Path, hw: Hardware) -> dict:
    """The tree's own probe helpers (and the helpers they call), defined in a
    namespace of their own; the memory-capacity probes answer the scenario."""
    path = root / "sglang" / "srt" / "utils" / "common.py"
    if not path.is_file():
        path = root / "sglang" / "srt" / "utils.py"
    if not path.is_file():
        return {}
    memory = lambda *a, **k: hw.total_mib  # noqa: E731 - nvidia-smi's memory.total, MiB
    answered = dict(get_device_memory_capacity=memory, get_nvgpu_memory_capacity=memory,
                    # the release's pinned flashinfer is installed on a GPU machine
                    is_flashinfer_available=lambda *a, **k: True)
    import logging
    import platform

    ns = {"torch": torch, "lru_cache": functools.lru_cache, "functools": functools, "sys": sys,
          "platform": platform, "os": os, "find_spec": importlib.util.find_spec, "importlib": importlib,
          "logger": logging.getLogger("sglang.probes"), "Tuple": tuple, "Optional": object, **answered}
    out = tree_functions(path, PROBES + RULE_HELPERS, ns, skip=tuple(answered))
    out.update(answered)
    return out


def _init_assignments(path: Path) -> list:
    """``self.NAME = EXPR`` statements of ``ModelConfig``'s methods (top level
    of each method body; ``__init__`` first, then the others in source order:
    v0.5.22+ moved some into helpers it calls), as (NAME, compiled EXPR, called names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "ModelConfig"):
            continue
        methods = [f for f in cls.body if isinstance(f, ast.FunctionDef)]
        methods.sort(key=lambda f: f.name != "__init__")
        for fn in methods:
            for node in fn.body:
                if (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Attribute)
                        and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "self"):
                    called = {c.func.id for c in ast.walk(node.value)
                              if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
                    expr = compile(ast.Expression(node.value), str(path), "eval")
                    out.append((node.targets[0].attr, expr, called))
    return out


# Model-type predicates ModelConfig.__init__ combines with the architecture
# helpers: the harness's models are none of these (as GPU.module_fakes).
_NOT_THIS_MODEL = ("is_deepseek_nsa", "is_deepseek_dsa", "is_deepseek_v4", "is_minimax_sparse")


def _complete_model_config(root: Path, mc) -> None:
    """The ModelConfig attributes the rules read that ``ModelConfig.__init__``
    computes from the HF config: each ``self.NAME = EXPR`` of the tree's own
    ``__init__`` that the harness's view lacks is evaluated on the view, with
    the tree's own module-level helpers (configs/model_config.py); one that
    needs more than the view holds stays missing (read -> MissingInput).
    ``has_attention_sinks`` by the tree's ``ModelConfig._detect_attention_sinks``."""
    if mc is None:
        return
    path = root / "sglang" / "srt" / "configs" / "model_config.py"
    if not path.is_file():
        return
    assigns = [(n, e, set(c)) for n, e, c in _code_cache(
        path, ("init_assignments",), lambda: [(n, e, sorted(c)) for n, e, c in _init_assignments(path)])]
    called = set().union(*(c for _, _, c in assigns)) if assigns else set()
    helpers = tree_functions(path, tuple(called) + ("ModelConfig._detect_attention_sinks",),
                             {"List": list, "any": any, "Optional": object})
    ns = dict(helpers, getattr=getattr, hasattr=hasattr, self=mc,
              enable_multimodal=getattr(mc, "is_multimodal", False),
              **{n: (lambda *a, **k: False) for n in _NOT_THIS_MODEL})
    for name, expr, _ in assigns:
        try:
            object.__getattribute__(mc, name)
            continue  # the harness's view already says
        except AttributeError:
            pass
        try:
            object.__setattr__(mc, name, eval(expr, ns))  # noqa: S307 - the tree's own expression
        except Exception:  # noqa: BLE001 - needs more than the view holds: stays missing
            pass
    fn = helpers.get("ModelConfig._detect_attention_sinks")
    if fn is not None:
        try:
            object.__getattribute__(mc, "has_attention_sinks")
        except AttributeError:
            object.__setattr__(mc, "has_attention_sinks", bool(fn(mc)))


# The model-path helpers the rules call (GGUF / ModelScope / Mistral checks):
# the tree's own code, on a local model directory (so none reaches a hub).
PATH_HELPERS = ("check_gguf_file", "resolve_hf_gguf_reference", "is_remote_url")


def _path_helpers(root: Path) -> dict:
    import glob

    out = {}
    for rel in ("utils/hf_transformers/common.py", "utils/hf_transformers_utils.py", "utils/common.py"):
        path = root / "sglang" / "srt" / rel
        if path.is_file():
            found = tree_functions(path, [n for n in PATH_HELPERS if n not in out],
                                   {"os": os, "glob": glob, "Optional": object, "Union": object, "Path": Path,
                                    "List": list})
            out.update(found)
    return out


@contextlib.contextmanager
def model_directory(hf) -> Iterator[str]:
    """A local model directory holding the HF config ``hf`` as its
    config.json (what the server is started with: a path on disk), for the
    block of a ``with`` statement; removed at its end."""
    cfg = {}
    for k, v in (vars(hf).items() if hf is not None else ()):
        if k.startswith("_"):
            continue
        if isinstance(v, (int, float, str, bool, type(None), list, dict)):
            cfg[k] = v
    d = tempfile.mkdtemp(prefix="sglo-model-")
    try:
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(cfg, fh)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Platform:
    """v0.5.19+'s ``get_platform()`` (runtime_context.PlatformContext): each
    fact is the probe its own tables (``_PLATFORM_PROBES``, ``_PLATFORM_VALUES``,
    read from the tree) name, called on the scenario's answers."""

    def __init__(self, table: dict, probes: dict):
        self._table, self._probes = table, probes

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        probe = self._table.get(name)
        if probe is None or probe not in self._probes:
            raise MissingInput("platform", name)
        return self._probes[probe]()


def _platform(root: Path, probes: dict):
    path = root / "sglang" / "srt" / "runtime_context.py"
    if not path.is_file():
        return None
    table = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if isinstance(target, ast.Name) and target.id in ("_PLATFORM_PROBES", "_PLATFORM_VALUES"):
            try:
                table.update(ast.literal_eval(node.value))
            except ValueError:
                pass
    return Platform(table, probes) if table else None


def _fields(cls) -> list[str]:
    """The ServerArgs fields: a dataclass up to v0.5.21, a msgspec Struct from v0.5.22."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    import msgspec.structs

    return [f.name for f in msgspec.structs.fields(cls)]


def _snap(obj, names):
    out = {}
    for n in names:
        try:
            v = object.__getattribute__(obj, n)
        except AttributeError:
            continue
        if type(v) in _IMMUTABLE:
            out[n] = v
            continue
        if type(v) in (list, tuple) and all(type(x) in _IMMUTABLE for x in v):
            out[n] = type(v)(v)  # equal to its deep copy, at a fraction of the cost
            continue
        try:
            out[n] = copy.deepcopy(v)
        except Exception:  # noqa: BLE001
            out[n] = v
    return out


_IMMUTABLE = (int, float, str, bool, type(None), bytes)


def _differs(a, b) -> bool:
    try:
        return bool(a != b)
    except Exception:  # noqa: BLE001
        return a is not b


class Recorder:
    """Attributes each field change to the innermost release rule running."""

    def __init__(self, obj, names):
        self.obj, self.names = obj, names
        self.rule_of: dict = {}
        self.depth = 0

    def wrap(self, fn, label):
        rec = self

        @functools.wraps(fn)
        def traced(*a, **k):
            before = _snap(rec.obj, rec.names)
            claimed_before = dict(rec.rule_of)
            rec.depth += 1
            try:
                return fn(*a, **k)
            finally:
                rec.depth -= 1
                after = _snap(rec.obj, rec.names)
                for n in rec.names:
                    if n in after and (n not in before or _differs(before[n], after[n])):
                        if rec.rule_of.get(n) == claimed_before.get(n):  # no inner rule claimed it
                            rec.rule_of[n] = label
        return traced

    def declare(self, args, source, **fields):
        """In place of declare_resolution where the tree's is a stand-in."""
        for k, v in fields.items():
            force_set(args, k, v)
            self.rule_of[k] = str(source)

    def publish(self, obj) -> None:
        """v0.5.19+: rules declare their results into ``_resolved_overrides``
        (arg_groups.overrides.declare_resolution); the launcher projects that
        stash onto the published config.  Project it onto the fields, in
        order, each attributed to the source its rule named."""
        try:
            stash = object.__getattribute__(obj, "_resolved_overrides")
        except AttributeError:
            stash = None
        for source, fields in stash or ():
            for k, v in fields.items():
                force_set(obj, k, v)
                self.rule_of[k] = str(source)
        self.fallbacks(obj)

    def fallbacks(self, obj) -> None:
        """v0.5.20+: a field declared ``Arg(resolvable=True, fallback=X)`` stays None
        on the ServerArgs when no rule answered, and the config bags the sizing
        reads (``get_schedule().mamba_full_memory_ratio``) hold X:
        ``runtime_context._build_config_bags`` reads every leaf through
        ``overrides.resolution_result``, which ends in ``arg_utils.with_fallback``.
        Project the release's own ``arg_utils.fallbacks_of`` the same way."""
        arg_utils = sys.modules.get("sglang.srt.arg_groups.arg_utils")
        fallbacks_of = getattr(arg_utils, "fallbacks_of", None)
        if fallbacks_of is None:
            return
        for k, v in fallbacks_of(type(obj)).items():
            if getattr(obj, k, None) is None:
                force_set(obj, k, v)
                self.rule_of[k] = "arg_groups.arg_utils.with_fallback (the field's declared fallback)"


def force_set(obj, name, value) -> None:
    """Set a field or attribute, also on a msgspec Struct (ServerArgs from v0.5.22)."""
    try:
        object.__setattr__(obj, name, value)
    except TypeError:
        import msgspec.structs

        if name in getattr(type(obj), "__struct_fields__", ()):
            msgspec.structs.force_setattr(obj, name, value)
        else:
            obj.__dict__[name] = value


@dataclasses.dataclass(frozen=True)
class ScenarioFlags:
    """The scenario's ``[server]`` keys, resolved as this release's own parser takes them."""

    given: dict      # fields of this release's ServerArgs: its constructor gets them
    aliased: dict    # key -> field: a flag the release's parser declares as an alias of a field (its dest)
    unknown: dict    # declared by the parser, stored under a name that is not a field: set as given


class FlagsRefused(Untestable):
    """The release's own parser refuses a scenario's ``[server]`` key (exit 125, git bisect run's skip:
    the scenario as written cannot be given to this release); the message is the parser's, with the
    renamed flag to write instead where ``flag_renames`` knows one."""


def _refusal(version: str, key: str, value, message: str) -> str:
    rename = renamed(key)
    return (f"SGLang {version}'s own parser refuses [server] {key} ({' '.join(argv_of(key, value))}): "
            f"\"{message}\"; " + (rename.remedy(value) if rename is not None else
                                   f"it is not a flag of this release: leave it out or use this release's "
                                   f"spelling (`python -m sglang.launch_server --help`)"))


def scenario_flags(server: dict, names, parser=None, version: str = "this release") -> ScenarioFlags:
    """Split ``server`` by the field ``names``; a key that is not a field is given to the release's own
    parser (``parser()`` builds it, called only then) as its flag: where it declares the flag (a
    deprecated alias, e.g. v0.5.17's --mamba-scheduler-strategy) the field it stores it in gets the
    parsed value, where it refuses the flag (v0.5.23: "unrecognized arguments") the run stops
    (``FlagsRefused``, with the parser's message and the renamed flag)."""
    given = {k: v for k, v in server.items() if k in names}
    aliased, unknown, refused = {}, {}, []
    rp = None
    for key, value in server.items():
        if key in names:
            continue
        if rp is None:
            try:
                rp = parser()
            except Exception as e:  # noqa: BLE001
                raise Untestable(f"[server] {key} is not a field of SGLang {version}'s ServerArgs, and its "
                                 f"parser (ServerArgs.add_cli_args) did not run here to say whether it takes "
                                 f"{argv_of(key, value)[0]} ({type(e).__name__}: {e})") from e
        argv = argv_of(key, value)
        try:
            parsed = rp.parse(argv)
        except FlagError as e:
            refused.append(_refusal(version, key, value, str(e)))
            continue
        dest = rp.dest_of(argv[0])
        if dest in names:
            aliased[key] = dest
            given.setdefault(dest, parsed[dest])
        else:
            unknown[key] = value
    if refused:
        raise FlagsRefused("; ".join(refused))
    return ScenarioFlags(given, aliased, unknown)


def scenario_class(cls, reads: set) -> type:
    """A subclass of the tree's ServerArgs ``cls`` whose instances add every
    public attribute read to ``reads`` (as ``server_args.NAME``) and raise
    ``MissingInput`` for a read of an attribute they lack."""

    def __getattr__(self, name):
        if name.startswith("__") or name.startswith("_"):
            raise AttributeError(name)
        raise MissingInput("server_args", name)

    def __getattribute__(self, name):
        if not name.startswith("_"):
            reads.add(f"server_args.{name}")
        return object.__getattribute__(self, name)

    return type("ScenarioServerArgs", (cls,), {"__getattr__": __getattr__, "__getattribute__": __getattribute__,
                                               "__module__": cls.__module__})


def trace_rule_methods(sub: type, cls: type, rec: Recorder) -> None:
    """The release's rules: every method of its ServerArgs ``cls`` (and of its
    bases in the tree) is set on ``sub`` (``scenario_class``) traced by
    ``rec``; dunder methods are left as they are."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("sglang."):
            continue
        for attr, fn in list(vars(klass).items()):
            if isinstance(fn, types.FunctionType) and not attr.startswith("__") and attr not in vars(sub):
                setattr(sub, attr, rec.wrap(fn, f"{klass.__name__}.{attr}"))


def config_of(target_hf, draft_hf, draft_paths: tuple):
    """The rules' ``get_config(path)``: the drafter's HF config for one of
    ``draft_paths`` (as given, or its local directory), else the target's."""

    def get_config(path=None, *a, **k):
        if draft_hf is not None and path in draft_paths:
            return draft_hf
        if target_hf is None:
            raise MissingInput("hf_config", f"get_config({path!r})")
        return target_hf

    return get_config


def rule_answers(root: Path, hw: Hardware, model_config, get_config, declare) -> dict:
    """What the harness answers by name to the release's rules: the tree's own
    probe helpers on the scenario's device (with v0.5.19+'s ``get_platform``),
    its model-path helpers, ``get_config``, ``get_model_config`` and
    ``declare_resolution`` (``declare``)."""
    probes = _probe_closure(root, hw)
    platform = _platform(root, probes)
    if platform is not None:
        probes = dict(probes, get_platform=lambda: platform)
    return dict(probes, **_path_helpers(root), get_config=get_config, declare_resolution=declare,
                get_model_config=lambda *a, **k: model_config)


def import_rule_modules(real) -> None:
    """Import every module of the release's flag-resolution package
    (``sglang.srt.arg_groups``) among the finder's ``real`` modules, so that
    its names are loaded before they are answered or traced."""
    for name in sorted(real):
        if name.startswith("sglang.srt.arg_groups") and name not in sys.modules:
            importlib.import_module(name)


def _sglang_modules():
    return [(name, mod) for name, mod in list(sys.modules.items()) if name.startswith("sglang")]


def standins_answered(fakes: dict):
    """For the block of a ``with`` statement: in every loaded ``sglang``
    module, each name of ``fakes`` that the module took from a stand-in is
    bound to the fake (the names the rules imported before they were
    answered); put back at the end."""
    return scoped.attributes([
        (mod, name, fake)
        for _, mod in _sglang_modules()
        for name, fake in fakes.items()
        if name in getattr(mod, "__dict__", {}) and loader.is_stub(mod.__dict__[name])])


# The functions of an arg_groups module that are the release's rules (hooks).
HOOK_PREFIXES = ("_handle", "handle_", "_resolve", "resolve_")


def hooks_traced(rec: Recorder):
    """For the block of a ``with`` statement: every rule function
    (``HOOK_PREFIXES``) that a real ``sglang.srt.arg_groups.*`` module defines
    is replaced by itself traced by ``rec`` (its label ``MODULE.FUNCTION``);
    put back at the end."""
    return scoped.attributes([
        (mod, attr, rec.wrap(fn, f"{modname.rsplit('.', 1)[-1]}.{attr}"))
        for modname, mod in _sglang_modules()
        if modname.startswith("sglang.srt.arg_groups.") and not isinstance(mod, loader.StubModule)
        for attr, fn in list(getattr(mod, "__dict__", {}).items())
        if isinstance(fn, types.FunctionType) and fn.__module__ == mod.__name__ and attr.startswith(HOOK_PREFIXES)])


def resolve(ctx, cls, model_config, hf_configs: dict):
    """Build the tree's ServerArgs from the scenario's flags; returns
    (instance, changes, notes).  ``cls`` is the tree's ServerArgs.

    The harness's answers are in place only while the release's constructor
    and rules run (each step below undoes itself at the end of the block,
    also when the release refuses)."""
    names = _fields(cls)
    from ..layout import version_of

    flags = scenario_flags(ctx.req["server"], names, lambda: build(ctx.root, cls),
                           f"v{version_of(ctx.root)}" if version_of(ctx.root) else "this tree")
    given = dict(flags.given)
    hw = Hardware.of(ctx.req["gpu"], ctx.gpu.world.world_size)
    sub = scenario_class(cls, ctx.reads)
    is_struct = not dataclasses.is_dataclass(cls)
    obj = None if is_struct else object.__new__(sub)

    def attach_model(o):
        force_set(o, "model_config", model_config)
        # v0.5.19+: model_config_of(record) hands back a memo "a fixture supplied" as it is
        force_set(o, "_model_config", model_config)

    if obj is not None:
        attach_model(obj)
    rec = Recorder(obj, names)  # obj is set below for a Struct (built by its own constructor)
    trace_rule_methods(sub, cls, rec)
    draft_path = given.get("speculative_draft_model_path")
    draft_dir = None
    init_values: dict = {}
    with contextlib.ExitStack() as scope:
        if "model_path" not in given:
            given["model_path"] = scope.enter_context(model_directory(hf_configs.get("target")))
        if draft_path is not None and hf_configs.get("draft") is not None:
            # A hub name would send the rules to the hub (GGUF / ModelScope checks):
            # the drafter is a local directory holding its config.json, as downloaded.
            draft_dir = given["speculative_draft_model_path"] = scope.enter_context(
                model_directory(hf_configs["draft"]))
        get_config = config_of(hf_configs.get("target"), hf_configs.get("draft"), (draft_path, draft_dir))
        _complete_model_config(ctx.root, model_config)
        fakes = rule_answers(ctx.root, hw, model_config, get_config, rec.declare)
        import_rule_modules(ctx.finder.real)  # every rule module imported before its names are answered
        scope.enter_context(standins_answered(fakes))
        scope.enter_context(hooks_traced(rec))
        scope.enter_context(loader.registered_fakes(fakes))  # names imported lazily inside the rules
        scope.enter_context(torch_cuda_answers(hw, int(float(ctx.req["gpu"].pre_load_free_gib) * (1 << 30))))
        try:
            post_init = getattr(cls, "__post_init__", None)

            def post(self):  # __init__ assigns the fields, then calls __post_init__: snapshot in between
                if rec.obj is None:
                    rec.obj = self
                    attach_model(self)
                init_values.update(_snap(self, names))
                if post_init is not None:
                    rec.wrap(post_init, f"{cls.__name__}.__post_init__")(self)

            sub.__post_init__ = post
            if is_struct:  # msgspec: the constructor assigns the fields and calls the
                obj = sub(**given)  # class's own __post_init__ (which leaves resolution to resolve_once)
                if rec.obj is None:
                    rec.obj = obj
                    attach_model(obj)
                    init_values.update(_snap(obj, names))
            else:
                cls.__init__(obj, **given)
                del sub.__post_init__
            if hasattr(cls, "resolve_once"):
                cls.resolve_once(obj)
            rec.publish(obj)
        except BaseException:
            # the release refused (or failed) mid-resolution: what it changed so far
            ctx.figures["resolution"] = _changes(obj, names, init_values, rec, cls, given, draft_dir, draft_path)
            raise
    for k, v in flags.unknown.items():
        force_set(obj, k, v)
    if draft_dir is not None and getattr(obj, "speculative_draft_model_path", None) == draft_dir:
        force_set(obj, "speculative_draft_model_path", draft_path)
    changes = _changes(obj, names, init_values, rec, cls, given, draft_dir, draft_path)
    notes = [f"--{k.replace('_', '-')}: this release's parser stores it in {flags.aliased[k]} (a deprecated "
             f"alias), as its server would" for k in flags.aliased]
    notes += [f"--{k.replace('_', '-')} is declared by this release's parser but is not a field of its "
              f"ServerArgs; set as given" for k in flags.unknown]
    return obj, changes, notes


def _changes(obj, names, init_values, rec, cls, given, draft_dir=None, draft_path=None) -> list:
    final = _snap(obj, names)
    out = []
    for n in names:
        if n not in final or n not in init_values:
            continue
        before, after = init_values[n], final[n]
        if draft_dir is not None and n == "speculative_draft_model_path":
            before = draft_path if before == draft_dir else before
            after = draft_path if after == draft_dir else after
        if _differs(before, after):
            row = {"flag": n, "given": _plain(before), "resolved": _plain(after),
                   "rule": rec.rule_of.get(n, f"{cls.__name__}.__post_init__"), "from_scenario": n in given}
            if loader.is_stub(after):  # a stand-in's answer reached the field: say so, never a value
                row["resolved"] = f"<stand-in {getattr(after, '__stub_name__', type(after).__stub_name__)}>"
                row["standin"] = True
            out.append(row)
    return out


def _plain(v):
    if isinstance(v, (int, float, str, bool, type(None))):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str, bool, type(None))) for x in v):
        return list(v)
    return repr(v)[:120]


def format_change(c: dict) -> str:
    return f"{c['flag']}: {c['given']!r} -> {c['resolved']!r}, by {c['rule']}"
