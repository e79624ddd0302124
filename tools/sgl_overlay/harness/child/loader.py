"""Targeted loader: execute only chosen real ``sglang`` modules from a source tree.

Every other ``sglang.*`` module is replaced by an inert stand-in (``StubModule``)
so that ``sglang/__init__.py`` and the GPU-only dependency chain never run.
Parent packages of the real modules are created as empty shells whose
``__init__.py`` is *not* executed.

The stand-ins absorb what import-time code does with them (attribute access,
calls, subscripts, subclassing, decorators) and are falsy, so a stubbed
predicate such as ``is_npu()`` takes upstream's default (CUDA) path.  Every
name taken from a stand-in is recorded in ``StubRegistry.touched`` so that a
failure caused by a stand-in can be reported by name.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

ROOT_PACKAGE = "sglang"


class StubRegistry:
    """What the stand-ins handed out, for diagnostics, and the named fakes.

    ``fakes`` maps a name (e.g. ``get_available_gpu_memory``) to the value any
    stand-in module hands out for it, so that GPU queries imported lazily
    inside upstream functions get the scenario's figure too.
    """

    touched: set[str] = set()
    fakes: dict = {}
    # The tree the finder serves, for the literal constants a stand-in hands out
    source_root: Path | None = None


# A stand-in hands out the tree's own *literal* top-level UPPER_CASE constants
# of its module's file (e.g. utils.common's SUPPORTED_LORA_TARGET_MODULES, which
# v0.5.16+ ServerArgs field annotations concatenate; the FLA kernels' CHUNK_SIZE
# the Mamba page-size rule reads): the value as written, no code run.
_TEXTS: dict = {}


def tree_literal(module: str, name: str):
    """(True, value) when the tree's file of ``module`` assigns ``name`` a
    literal at top level, else (False, None)."""
    import re

    root = StubRegistry.source_root
    if root is None:
        return False, None
    if module not in _TEXTS:
        base = Path(root).joinpath(*module.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        _TEXTS[module] = path.read_text(encoding="utf-8") if path.is_file() else ""
    text = _TEXTS[module]
    if not text:
        return False, None
    m = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]+)?=", text, re.M)
    if not m:
        return False, None
    lines = text[m.start():].splitlines()
    stmt = [lines[0]]
    for line in lines[1:]:  # up to the next top-level statement
        if line and not line[0].isspace() and line[0] not in ")]}":
            break
        stmt.append(line)
        if line and line[0] in ")]}":
            break
    try:
        node = ast.parse("\n".join(stmt)).body[0]
        return True, ast.literal_eval(node.value)
    except (SyntaxError, ValueError, IndexError, AttributeError):
        return False, None


class _StubMeta(type):
    """Metaclass of stand-in classes: absorbs anything done to the class itself."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_stub_class(f"{cls.__stub_name__}.{name}")

    def __call__(cls, *args, **kwargs):
        # Used as a decorator (@stub or @stub(...)(fn)): hand the function back.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]
        return type.__call__(cls)

    def __getitem__(cls, item):
        return cls

    def __bool__(cls):
        return False

    def __iter__(cls):
        return iter(())

    def __len__(cls):
        return 0

    def __or__(cls, other):
        return cls

    __ror__ = __or__

    def __repr__(cls):
        return f"<sglang stand-in {cls.__stub_name__}>"

    def __mro_entries__(cls, bases):  # pragma: no cover - classes are real types already
        return (cls,)


class _StubInstance:
    """Instances of stand-in classes: falsy, absorbing."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return make_stub_class(f"{type(self).__stub_name__}().{name}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return self

    def __getitem__(self, item):
        return self

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def make_stub_class(qualname: str) -> type:
    StubRegistry.touched.add(qualname)
    cls = _StubMeta(qualname.rsplit(".", 1)[-1], (_StubInstance,), {"__stub_name__": qualname})
    return cls


def is_stub(obj) -> bool:
    return isinstance(obj, (_StubMeta, _StubInstance, StubModule))


class StubModule(types.ModuleType):
    """An inert stand-in for a module that is not under test."""

    __stub__ = True

    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []  # lets ``import sglang.x.y`` find children
        self.__all__ = []  # ``from stub import *`` imports nothing
        self.__file__ = f"<sglang stand-in {name}>"

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in StubRegistry.fakes:
            return StubRegistry.fakes[name]
        if name.isupper() or name.lstrip("_").isupper():
            found, literal = tree_literal(self.__name__, name)
            if found:
                setattr(self, name, literal)
                return literal
        value = make_stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module):
        pass


class _ShellLoader(importlib.abc.Loader):
    """A real package directory whose ``__init__.py`` is not executed."""

    def __init__(self, path: Path):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = [str(self.path)]


class _CachedSourceLoader(importlib.machinery.SourceFileLoader):
    """A real module of the tree, its compiled code kept in the harness's own
    code cache ($SGL_OVERLAY_CACHE/harness-code, by path, size and mtime):
    the release trees are not written to (no __pycache__ in them), and
    PYTHONDONTWRITEBYTECODE does not make every run compile them again."""

    def get_code(self, fullname):
        from .code_cache import cached

        path = Path(self.get_filename(fullname))
        try:
            return cached(path, ("module",), lambda: compile(path.read_bytes(), str(path), "exec", dont_inherit=True))
        except OSError:
            return super().get_code(fullname)


class _OwnCodeFinder(importlib.abc.MetaPathFinder):
    """The harness's own modules (``sgl_overlay.*``), found as usual, their
    compiled code taken from the code cache (``_CachedSourceLoader``)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(OWN_PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _CachedSourceLoader(fullname, spec.origin)
        return spec


OWN_PACKAGE = __name__.split(".")[0]


def cache_own_code() -> None:
    """Where no bytecode is written (PYTHONDONTWRITEBYTECODE), keep the compiled
    code of the harness's own modules in the code cache, as the tree's: the
    child interpreter would otherwise compile each of them on every run."""
    if sys.dont_write_bytecode and not any(isinstance(f, _OwnCodeFinder) for f in sys.meta_path):
        from . import code_cache  # noqa: F401 - the cache itself is imported as usual, first

        sys.meta_path.insert(0, _OwnCodeFinder())


def _spec(fullname, file, package_dir=None):
    loader = _CachedSourceLoader(fullname, str(file))
    if package_dir is not None:
        return importlib.util.spec_from_file_location(fullname, file, loader=loader,
                                                      submodule_search_locations=[str(package_dir)])
    return importlib.util.spec_from_file_location(fullname, file, loader=loader)


class TreeFinder(importlib.abc.MetaPathFinder):
    """Resolves ``sglang.*``: real modules from the tree, shells, or stand-ins."""

    def __init__(self, source_root: Path, real: set[str]):
        self.source_root = Path(source_root)
        self.real = set(real)
        self.shells = {ROOT_PACKAGE}
        for name in self.real:
            parts = name.split(".")
            for i in range(1, len(parts)):
                self.shells.add(".".join(parts[:i]))

    def _path_of(self, fullname: str) -> Path:
        return self.source_root.joinpath(*fullname.split("."))

    def find_spec(self, fullname, path=None, target=None):
        if fullname != ROOT_PACKAGE and not fullname.startswith(ROOT_PACKAGE + "."):
            return None
        base = self._path_of(fullname)
        if fullname in self.real:
            if base.is_dir():
                return _spec(fullname, base / "__init__.py", base)
            file = base.with_suffix(".py")
            if file.is_file():
                return _spec(fullname, file)
            raise ModuleNotFoundError(f"{fullname}: no {file} in the tree", name=fullname)
        if fullname in self.shells and base.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, _ShellLoader(base), is_package=True)
            spec.submodule_search_locations = [str(base)]
            return spec
        spec = importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        spec.submodule_search_locations = []
        return spec


def install(source_root: Path, real: list[str] | set[str]) -> TreeFinder:
    """Put the tree behind ``sys.meta_path``; returns the finder (once per process,
    unless ``uninstall`` undoes it first; ``installed`` does both)."""
    for name in list(sys.modules):
        if name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + "."):
            del sys.modules[name]
    finder = TreeFinder(source_root, set(real))
    StubRegistry.source_root = Path(source_root)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall(finder: TreeFinder) -> None:
    """Undo ``install``: remove the finder, every ``sglang`` module, and the
    named fakes, so that another tree (or device) can be installed in the
    same process."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in list(sys.modules):
        if name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + "."):
            del sys.modules[name]
    StubRegistry.fakes.clear()
    _TEXTS.clear()


@contextlib.contextmanager
def installed(source_root: Path, real: list[str] | set[str], fakes: dict | None = None):
    """``install`` for the duration of a ``with`` block (with ``fakes`` set
    first, so modules see them at import), then ``uninstall``."""
    finder = install(source_root, real)
    try:
        if fakes:
            set_fakes(fakes)
        yield finder
    finally:
        uninstall(finder)


def definitions(source_root: Path, module: str, names: list[str], namespace: dict) -> dict:
    """Run only the named top-level definitions (functions, assignments) of a
    tree's module, in file order, with ``namespace`` as their globals; return
    them by name.  For small helpers whose module cannot be imported here
    (e.g. ``sglang.srt.utils.common``): upstream's own code, not a restatement.
    A name the module does not define at top level raises ``KeyError``."""
    path = Path(source_root).joinpath(*module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    wanted, body, found = set(names), [], set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined = {node.name}
        elif isinstance(node, ast.Assign):
            defined = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined = {node.target.id}
        else:
            continue
        if defined & wanted:
            body.append(node)
            found |= defined
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"{path}: no top-level definition of {', '.join(missing)}")
    glb = dict(namespace, __name__=module)
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), glb)
    return {n: glb[n] for n in names}


def load(name: str) -> types.ModuleType:
    """Import one real module (must be among the finder's ``real`` names)."""
    module = importlib.import_module(name)
    if isinstance(module, StubModule):
        raise ImportError(f"{name} resolved to a stand-in; add it to the real modules")
    return module


def add_real(finder: TreeFinder, name: str) -> None:
    finder.real.add(name)
    parts = name.split(".")
    for i in range(1, len(parts)):
        finder.shells.add(".".join(parts[:i]))


def set_fakes(fakes: dict) -> None:
    """Register named fakes and rebind them wherever a ``sglang`` module already
    took a stand-in for that name (modules imported before the fake existed)."""
    StubRegistry.fakes.update(fakes)
    for modname, mod in list(sys.modules.items()):
        if not (modname == ROOT_PACKAGE or modname.startswith(ROOT_PACKAGE + ".")):
            continue
        d = getattr(mod, "__dict__", {})
        for name, fake in fakes.items():
            if name in d and is_stub(d[name]):
                setattr(mod, name, fake)


@contextlib.contextmanager
def registered_fakes(fakes: dict):
    """``fakes`` in ``StubRegistry.fakes`` for the block of a ``with`` statement
    (what any stand-in module hands out for a name, so that a name imported
    lazily inside upstream code gets the fake too); at the end the registry
    holds exactly what it held before.  Unlike ``set_fakes``, modules that
    already took a stand-in are not rebound (``scoped.attributes`` does that
    where wanted)."""
    saved = dict(StubRegistry.fakes)
    StubRegistry.fakes.update(fakes)
    try:
        yield
    finally:
        StubRegistry.fakes.clear()
        StubRegistry.fakes.update(saved)
