"""What a server's start imports that a GPU machine and a bundle lack
(tools/imports.py; docs/bundle.md, "What a release's start imports").

``walk`` follows the module-level imports of a source tree (a directory or
a wheel) from root modules (``sglang.launch_server``, ...) through the tree's
own modules, by reading their syntax trees, never importing them: what
runs when the module is imported, so function bodies are skipped, and so
are ``if TYPE_CHECKING:`` blocks, ``if __name__ == "__main__":`` blocks of
every module but the root, and imports in the body of a ``try`` whose
handlers catch ImportError (the module copes without them).  Both
branches of any other ``if`` are followed: the walk cannot know which one
the machine takes, so it may name more than a start needs, never less of
what it reads.  Not seen: imports inside functions (a model class loaded
when the model is chosen, a grammar backend loaded for its first request),
``importlib.import_module`` calls, a module's ``__getattr__``.

``missing`` is the decision: which third-party top-level modules the walk
found that neither the machine's packages nor the bundle's wheels provide.
"""
import ast
import dataclasses
import re
import sys
import zipfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from .errors import UsageError

# top-level module -> the distributions that provide it, where the names differ beyond
# canonicalisation (a machine's package list names distributions, imports name modules)
DISTRIBUTIONS = {
    "yaml": ("pyyaml",), "PIL": ("pillow",), "cv2": ("opencv-python", "opencv-python-headless"),
    "sklearn": ("scikit-learn",), "skimage": ("scikit-image",), "google": ("protobuf",),
    "dateutil": ("python-dateutil",), "zmq": ("pyzmq",), "jwt": ("pyjwt",), "attr": ("attrs",),
    "IPython": ("ipython",), "sgl_kernel": ("sglang-kernel",), "tvm_ffi": ("apache-tvm-ffi",),
    "multipart": ("python-multipart",), "python_multipart": ("python-multipart",),
    "opentelemetry": ("opentelemetry-api",), "flashinfer": ("flashinfer-python",),
    "partial_json_parser": ("partial-json-parser",), "pynvml": ("nvidia-ml-py",),
    "_cffi_backend": ("cffi",), "rpds": ("rpds-py",), "pkg_resources": ("setuptools",),
    "setuptools": ("setuptools",), "_distutils_hack": ("setuptools",),
}

# standard-library modules that later Pythons removed (PEP 594 and earlier): the walk runs
# on this interpreter, the server on the machine's
REMOVED = {(3, 12): {"distutils", "imp", "asynchat", "asyncore", "smtpd"},
           (3, 13): {"aifc", "audioop", "cgi", "cgitb", "chunk", "crypt", "imghdr", "mailcap", "msilib",
                     "nis", "nntplib", "ossaudiodev", "pipes", "sndhdr", "spwd", "sunau", "telnetlib",
                     "uu", "xdrlib", "lib2to3"}}

GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def stdlib(python):
    """The standard library's top-level modules on CPython ``python`` ((3, 12)),
    from this interpreter's list less what later versions removed."""
    names = set(sys.stdlib_module_names) | {"__future__"}
    for version, gone in REMOVED.items():
        if python >= version:
            names -= gone
    return names


class Tree:
    """The Python sources of a directory or a wheel: ``{module: (file, is_package)}``."""

    def __init__(self, path):
        self.path = Path(path)
        self.zip = zipfile.ZipFile(self.path) if self.path.is_file() else None
        files = self.zip.namelist() if self.zip else [str(p.relative_to(self.path)).replace("\\", "/")
                                                     for p in self.path.rglob("*") if p.is_file()]
        self.modules, self.tops, self.namespaces = {}, set(), set()
        for f in files:
            parts = f.split("/")
            if ".dist-info" in parts[0] or ".data" in parts[0]:
                continue
            m = re.fullmatch(r"([A-Za-z_]\w*)(?:\.[\w-]+)*\.(py|so|pyd)", parts[-1])
            if not m or not all(p.isidentifier() for p in parts[:-1]):
                continue
            self.tops.add(parts[0] if len(parts) > 1 else m[1])
            for i in range(1, len(parts)):     # a folder without __init__.py: a namespace package
                self.namespaces.add(".".join(parts[:i]))
            if m[2] != "py":
                self.modules.setdefault(".".join(parts[:-1] + [m[1]]), (None, False))
            elif m[1] == "__init__":
                self.modules[".".join(parts[:-1])] = (f, True)
            else:
                self.modules[".".join(parts[:-1] + [m[1]])] = (f, False)
        for n in self.namespaces - set(self.modules):
            self.modules[n] = (None, True)

    def source(self, module):
        f = self.modules[module][0]
        if f is None:
            return None
        data = self.zip.read(f) if self.zip else (self.path / f).read_bytes()
        return data.decode("utf-8", "replace")


def _is_type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_main_guard(test):
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def _catches_import_error(handlers):
    for h in handlers:
        if h.type is None:
            return True
        for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]):
            if getattr(t, "id", getattr(t, "attr", None)) in GUARDS:
                return True
    return False


def module_level_imports(tree, is_root=False):
    """``[(lineno, module, names, condition)]`` of the imports that run when
    the module whose syntax tree is ``tree`` is imported (as ``__main__``
    when ``is_root``); ``module`` as written (``.`` prefixes for relative
    ones), ``names`` the ``from`` names, ``condition`` the source of the
    innermost module-level ``if`` test it depends on (``not (...)`` in an
    ``else``), None when every import of the module runs it."""
    out = []

    def visit(stmts, cond):
        for s in stmts:
            if isinstance(s, ast.Import):
                out.extend((s.lineno, a.name, (), cond) for a in s.names)
            elif isinstance(s, ast.ImportFrom):
                out.append((s.lineno, "." * s.level + (s.module or ""), tuple(a.name for a in s.names), cond))
            elif isinstance(s, ast.If):
                test = ast.unparse(s.test)
                if not (_is_type_checking(s.test) or (_is_main_guard(s.test) and not is_root)):
                    visit(s.body, None if _is_main_guard(s.test) else test)
                visit(s.orelse, f"not ({test})")
            elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
                if not _catches_import_error(s.handlers):
                    visit(s.body, cond)
                for h in s.handlers:
                    visit(h.body, cond)
                visit(s.orelse, cond)
                visit(s.finalbody, cond)
            elif isinstance(s, ast.ClassDef):
                visit(s.body, cond)
            elif isinstance(s, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                visit(s.body, cond)
                visit(getattr(s, "orelse", []), cond)
            elif type(s).__name__ == "Match":
                for case in s.cases:
                    visit(case.body, cond)
    visit(tree.body, None)
    return out


def _absolute(module, is_package, written):
    level = len(written) - len(written.lstrip("."))
    if not level:
        return written
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    rest = written[level:]
    return ".".join(base + ([rest] if rest else []))


@dataclasses.dataclass
class Walk:
    modules: int                # the tree's modules the start may execute
    always: int                 # ... of which every start executes
    external: dict              # top-level module -> [{"at": "importer:line", "if": the statement's condition
    #                             or None, "module_conditional": whether the importer is imported only under one}]
    internal_missing: dict      # a module of the tree's packages that the tree lacks -> [the same]
    unparsed: dict              # module -> the SyntaxError this interpreter gave


def _imports(tree, mod, roots, cache):
    """``[(line, absolute target, names, condition)]`` of ``mod``, None for a
    compiled module or namespace package, a SyntaxError's text for a file
    this interpreter cannot parse; parsed once per walk (``cache``)."""
    if mod not in cache:
        text = tree.source(mod) if mod in tree.modules else None
        try:
            syntax = None if text is None else ast.parse(text)
        except SyntaxError as e:
            cache[mod] = f"{e.msg} (line {e.lineno})"
        else:
            cache[mod] = None if syntax is None else [
                (line, _absolute(mod, tree.modules[mod][1], written), names, cond)
                for line, written, names, cond in module_level_imports(syntax, is_root=mod in roots)]
    return cache[mod]


def _reach(tree, roots, conditional, cache):
    """The tree's modules reachable from ``roots`` (through conditional
    imports too when ``conditional``)."""
    seen, queue = set(), list(roots)
    while queue:
        mod = queue.pop()
        if mod in seen:
            continue
        seen.add(mod)
        parts = mod.split(".")
        queue.extend(".".join(parts[:i]) for i in range(1, len(parts)))   # its packages run first
        imports = _imports(tree, mod, roots, cache)
        for _, target, names, cond in imports if isinstance(imports, list) else ():
            if (cond is None or conditional) and target.split(".")[0] in tree.tops and target in tree.modules:
                queue.append(target)
                queue.extend(f"{target}.{n}" for n in names if f"{target}.{n}" in tree.modules)
    return seen & set(tree.modules)


def walk(tree, roots):
    """The module-level imports of ``tree`` (a ``Tree``) reachable from the
    modules ``roots``: an import is unconditional (``unconditional(entry)``)
    when its statement is and its module is reached from a root through
    unconditional imports alone."""
    cache = {}
    always = _reach(tree, roots, False, cache)
    reached = _reach(tree, roots, True, cache)
    external, internal, unparsed = {}, {}, {}
    for mod in sorted(reached):
        imports = _imports(tree, mod, roots, cache)
        if isinstance(imports, str):
            unparsed[mod] = imports
        for line, target, _, cond in imports if isinstance(imports, list) else ():
            entry = {"at": f"{mod}:{line}", "if": cond, "module_conditional": mod not in always}
            top = target.split(".")[0]
            if top not in tree.tops:
                external.setdefault(top, []).append(entry)
            elif target not in tree.modules:
                internal.setdefault(target, []).append(entry)
    return Walk(len(reached), len(always), external, internal, unparsed)


def unconditional(entry):
    """Whether an import ``walk`` found runs on every start."""
    return entry["if"] is None and not entry["module_conditional"]


def parse_packages(text):
    """Distribution names from ``pip list --format freeze`` (``name==version``,
    ``name @ url``) or a plain list (names separated by newlines, commas or
    spaces), canonicalised; ``-e``/``#`` lines are skipped."""
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        if re.search(r"==|\s@\s", line):      # a requirement: pip freeze's `name==version`, `name @ url`
            try:
                names.add(canonicalize_name(Requirement(line).name))
            except InvalidRequirement as e:
                raise UsageError(f"the machine's package list has {line!r}, which is not NAME==VERSION: {e}",
                                 hint="give `pip list --format freeze` output, or names one a line") from None
            continue
        names.update(canonicalize_name(n) for n in re.split(r"[,\s]+", line) if n)
    return names


def wheel_tops(wheel):
    """The top-level modules a wheel installs (from its members)."""
    return Tree(wheel).tops


def missing(external, python, machine, bundle_tops):
    """``(always, conditional)``: ``{top: importers}`` of the ``external``
    modules (``Walk.external``) that are neither in the standard library of
    ``python`` nor provided by a distribution in ``machine`` (canonical
    names) nor installed by the bundle (``bundle_tops``); ``always`` those
    that some unconditional import needs (their conditional importers
    too), ``conditional`` the rest."""
    std = stdlib(python)
    always, conditional = {}, {}
    for top, where in sorted(external.items()):
        dists = DISTRIBUTIONS.get(top, ()) + (canonicalize_name(top),)
        if top in std or top in bundle_tops or any(d in machine for d in dists):
            continue
        (always if any(unconditional(w) for w in where) else conditional)[top] = where
    return always, conditional
