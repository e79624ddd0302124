"""The prompt set of the speculative-value check (tools/gpu/spec_value.py): questions written
from the Python standard library's own docstrings, available offline on every machine, split
by module into training prompts (the target's greedy answers train the drafter) and held-out
evaluation prompts (the benchmark), so no evaluated function was seen in training.

Pure and standard library only (tests/gpu/test_spec_prompts.py): `questions` walks a fixed list
of modules in the interpreter that runs it (docstrings differ between Python versions, so the
set is built once, on the CPU machine, and carried tokenised: spec_value.py prepare), `split`
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
    if not doc:
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
