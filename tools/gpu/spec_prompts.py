"""The prompt set of the speculative-value check (tools.gpu.spec_value): questions written
from the Python standard library's own docstrings, available offline on every machine, split
by module into training prompts (the target's greedy answers train the drafter) and held-out
evaluation prompts (the benchmark), so no evaluated function was seen in training.

Pure and standard library only (tests/gpu/test_spec_prompts.py): `questions` walks a fixed list
of modules in the interpreter that runs it (docstrings differ between Python versions, so the
set is built once, on the CPU machine, and carried tokenised: spec_value prepare), `split`
assigns whole modules to one side by a hash of the module's name."""
import hashlib
import importlib
import inspect
from dataclasses import dataclass

# modules with many documented public callables; imported, never run
MODULES = (
    "argparse", "array", "base64", "bisect", "calendar", "cmath", "codecs", "collections", "colorsys",
    "configparser", "contextlib", "copy", "csv", "datetime", "decimal", "difflib", "email.utils", "enum",
    "filecmp", "fnmatch", "fractions", "functools", "getopt", "gettext", "glob", "gzip", "hashlib", "heapq",
    "hmac", "html", "http.client", "http.cookies", "imaplib", "inspect", "io", "ipaddress", "itertools", "json",
    "keyword", "linecache", "locale", "logging", "lzma", "mailbox", "math", "mimetypes", "netrc", "numbers",
    "operator", "os", "os.path", "pathlib", "pickle", "pkgutil", "platform", "plistlib", "poplib", "pprint",
    "queue", "quopri", "random", "re", "reprlib", "sched", "secrets", "selectors", "shelve", "shlex", "shutil",
    "smtplib", "socket", "sqlite3", "ssl", "stat", "statistics", "string", "struct", "subprocess", "sysconfig",
    "tarfile", "tempfile", "textwrap", "threading", "time", "timeit", "tokenize", "traceback", "types",
    "typing", "unicodedata", "urllib.parse", "urllib.request", "uuid", "warnings", "wave", "weakref",
    "xml.dom.minidom", "xml.etree.ElementTree", "zipfile", "zlib",
)

TEMPLATES = (
    "What does `{name}` do in Python? The documentation says: \"{doc}\" Explain it in your own words.",
    "Write a short Python example that uses `{name}`. Its documentation says: \"{doc}\"",
    "I am reading the Python documentation of `{name}`: \"{doc}\" When would I use it, and what should I watch out for?",
)


@dataclass(frozen=True)
class Question:
    module: str
    name: str       # the qualified name, e.g. json.dumps
    text: str       # the user's message


def first_sentence(doc, limit=240):
    """The docstring's first paragraph as one line, cut at its first sentence end or at
    `limit` characters; '' for a missing docstring."""
    if not doc or not isinstance(doc, str):
        return ""
    para = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    end = para.find(". ")
    if 0 < end < limit:
        para = para[:end + 1]
    return para[:limit].strip()


def _stable(s):
    return int.from_bytes(hashlib.sha256(s.encode()).digest()[:8], "big")


def questions(modules=MODULES, all_templates=False):
    """One question per public documented callable of each module (its own, not re-exported
    ones), in a fixed order; the template is chosen by a hash of the qualified name, or
    (all_templates) one question per template."""
    out, seen = [], set()
    for modname in modules:
        try:
            mod = importlib.import_module(modname)
        except ImportError:       # a module this interpreter lacks: left out (the set is carried built)
            continue
        for attr in sorted(vars(mod)):
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr)
            owner = getattr(obj, "__module__", None) or modname
            if not callable(obj) or owner.lstrip("_").split(".")[0] != modname.split(".")[0]:
                continue
            doc = first_sentence(getattr(obj, "__doc__", None))
            qual = f"{modname}.{attr}"
            if len(doc) < 20 or qual in seen or '"' in doc:
                continue
            seen.add(qual)
            chosen = TEMPLATES if all_templates else (TEMPLATES[_stable(qual) % len(TEMPLATES)],)
            out += [Question(modname, qual, t.format(name=qual, doc=doc)) for t in chosen]
    return out


def is_eval_module(module, eval_share=10):
    """Whether a module's questions are held out for evaluation (about 1 in eval_share modules)."""
    return _stable("eval:" + module) % eval_share == 0


def split(qs, n_eval, n_train, eval_share=10):
    """(train, eval): eval from the held-out modules, train from the others, each list in a
    fixed order (a hash of the name) cut to its size; no module is on both sides."""
    held = sorted((q for q in qs if is_eval_module(q.module, eval_share)), key=lambda q: _stable(q.text))
    rest = sorted((q for q in qs if not is_eval_module(q.module, eval_share)), key=lambda q: _stable(q.text))
    if len(held) < n_eval:
        raise ValueError(f"spec_prompts: only {len(held)} held-out questions for {n_eval} evaluation prompts; "
                         "lower --eval-prompts or raise the modules' share (eval_share)")
    return rest[:n_train], held[:n_eval]


def prompt_sets(n_eval=64, n_train=3000, modules=MODULES, eval_share=10):
    """(train, eval): evaluation questions one per callable of the held-out modules; training
    questions every template of every callable of the other modules (more answers to learn
    from, none about an evaluated module)."""
    train, _ = split(questions(modules, all_templates=True), 0, n_train, eval_share)
    _, ev = split(questions(modules), n_eval, 0, eval_share)
    return train, ev


# ------------------------------------------------------------------------------ the drafter's corpus (issue 42)
# Tens of thousands of training questions, still offline: every public module of this interpreter's
# standard library (its own list, sys.stdlib_module_names, and each package's first-level submodules),
# questions from the docstrings of its callables and of their classes' methods (every template), and
# questions that quote the Python source of its functions and methods.  The evaluation prompts stay
# prompt_sets' (the benchmark's); nothing of a held-out module, or of a module inside one, is trained on.
SOURCE_TEMPLATES = (
    "Explain what this function from Python's `{module}` module does, step by step:\n```python\n{src}\n```",
    "Write a docstring and a short usage example for this Python function:\n```python\n{src}\n```",
    "Review this code from the Python standard library (`{module}`) and suggest one improvement:\n"
    "```python\n{src}\n```",
)
# modules that act when imported (open a browser, print, start a GUI) or are the interpreter's own tests
SKIP_MODULES = frozenset({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
                          "ensurepip", "pydoc_data", "__hello__", "__phello__", "xxlimited", "xxsubtype"})


def held_out(module, eval_share=10):
    """Whether anything of `module` is held out: it or a package above it (an underscore-prefixed
    twin, _pickle for pickle, counts as the module) is an evaluation module."""
    parts = module.lstrip("_").split(".")
    return any(is_eval_module(".".join(parts[:i]), eval_share) or is_eval_module("_" + ".".join(parts[:i]), eval_share)
               for i in range(1, len(parts) + 1))


def corpus_modules(names=None):
    """The standard library's public modules (sys.stdlib_module_names, or `names`) and the first-level
    submodules of its packages, sorted; SKIP_MODULES and their submodules left out."""
    import pkgutil
    import sys
    base = sorted(n for n in (names if names is not None else sys.stdlib_module_names)
                  if not n.startswith("_") and n not in SKIP_MODULES)
    out = set()
    for n in base:
        out.add(n)
        try:
            mod = importlib.import_module(n)
        except Exception:       # noqa: BLE001 - a module this interpreter cannot import is left out
            continue
        for info in pkgutil.iter_modules(getattr(mod, "__path__", None) or []):
            if not info.name.startswith("_") and info.name not in ("test", "tests"):
                out.add(f"{n}.{info.name}")
    return sorted(out)


def _members(mod, modname):
    """(qualified name, object) of a module's own public callables and of its public classes'
    own public methods, in a fixed order."""
    top = modname.split(".")[0]
    out = []
    for attr in sorted(vars(mod)):
        if attr.startswith("_"):
            continue
        obj = getattr(mod, attr, None)
        owner = getattr(obj, "__module__", None) or modname
        if not callable(obj) or not isinstance(owner, str) or owner.lstrip("_").split(".")[0] != top:
            continue
        out.append((f"{modname}.{attr}", obj))
        if inspect.isclass(obj):
            for m in sorted(vars(obj)):
                f = vars(obj)[m]
                if not m.startswith("_") and (inspect.isfunction(f) or inspect.ismethoddescriptor(f)):
                    out.append((f"{modname}.{attr}.{m}", f))
    return out


def source_of(obj, min_lines=3, max_lines=40, max_chars=1800):
    """The dedented Python source of a function or method, or '' (builtins, too short or too long)."""
    if not inspect.isfunction(obj):
        return ""
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        return ""
    import textwrap
    src = textwrap.dedent(src).strip("\n")
    n = src.count("\n") + 1
    return src if min_lines <= n <= max_lines and len(src) <= max_chars else ""


def corpus_questions(modules, eval_share=10):
    """Training questions of the corpus: for every module not held out, each member's docstring in
    every template (TEMPLATES) and each function's source in every SOURCE_TEMPLATES; unique texts,
    in a fixed order (a hash of the text).  Held-out modules (held_out) give none."""
    out, seen = [], set()
    for modname in modules:
        if held_out(modname, eval_share):
            continue
        try:
            mod = importlib.import_module(modname)
        except Exception:       # noqa: BLE001 - not importable here: left out (the set is carried built)
            continue
        for qual, obj in _members(mod, modname):
            owner = getattr(obj, "__module__", None) or modname
            if isinstance(owner, str) and held_out(owner, eval_share):
                continue
            doc = first_sentence(getattr(obj, "__doc__", None))
            if len(doc) >= 20 and '"' not in doc:
                out += [Question(modname, qual, t.format(name=qual, doc=doc)) for t in TEMPLATES]
            src = source_of(obj)
            if src:
                out += [Question(modname, qual, t.format(module=modname, src=src)) for t in SOURCE_TEMPLATES]
    uniq = []
    for q in sorted(out, key=lambda q: _stable(q.text)):
        if q.text not in seen:
            seen.add(q.text)
            uniq.append(q)
    return uniq


def corpus_sets(n_eval=64, n_train=None, eval_share=10, modules=None):
    """(train, eval): eval exactly prompt_sets' (the benchmark's held-out questions); train the
    corpus (corpus_questions over corpus_modules), cut to n_train when given."""
    _, ev = prompt_sets(n_eval, 0, eval_share=eval_share)
    train = corpus_questions(corpus_modules() if modules is None else modules, eval_share)
    return (train if n_train is None else train[:n_train]), ev
