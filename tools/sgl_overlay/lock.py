"""upstream.lock: what upstream SGLang this overlay applies to.

The lock is TOML.  Every field is validated on load; a missing or malformed
field is a UsageError (exit 2) that names the field.  See docs/lock.md.

Reading uses the standard library's tomllib; writing uses tomlkit, which
escapes every string as TOML requires and, when a lock is updated, keeps
its comments and layout (docs/dependencies.md).
"""
import dataclasses
import re
import tomllib
from pathlib import Path

import tomlkit
from tomlkit.items import KeyType, SingleKey

from . import versions
from .errors import UsageError
from .paths import relpath


class _Check:
    """A field's format: ``pattern`` names it in errors, ``match`` tests it."""

    def __init__(self, pattern, match):
        self.pattern, self.match = pattern, match


HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
VERSION = _Check("a PEP 440 release number such as 0.5.12.post1",
                 lambda s: versions.release(s, dev=True) is not None)
WHEEL_NAME = _Check("a wheel file name NAME-VERSION-PY-ABI-PLATFORM.whl", lambda s: versions.wheel(s) is not None)
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclasses.dataclass(frozen=True)
class Lock:
    path: Path
    repo: str
    tag: str
    version: str
    commit: str
    date: str
    subdir: str               # "python/sglang"
    tree: str                 # exact git tree id of subdir at commit
    tree_normalized: str      # same, every file mode 100644, symlinks kept
    artifact_filename: str
    artifact_sha256: str
    artifact_root: str        # directory inside the artifact that is subdir
    generated: tuple          # artifact-only files (paths relative to subdir)
    compiled: tuple           # glob patterns of compiled modules (artifact only)
    symlinks: dict            # path -> target, regular files in the artifact
    executable: tuple         # paths whose git mode is 100755
    dependencies: dict        # the release's own pins
    # directories of subdir at the tag that the artifact does not ship (the
    # release's exclude-package-data): left out of the trees proven, on every source
    excluded: tuple = ()
    # the release's wheels for other Python tags: {filename: sha256}, each
    # recorded the first time it is fetched (trust on first use, docs/lock.md)
    wheels: dict = dataclasses.field(default_factory=dict)

    @property
    def wheel_tags(self):
        return versions.wheel(self.artifact_filename)[2]

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        for k in ("generated", "compiled", "executable", "excluded"):
            d[k] = list(d[k])
        return d

    def digest_fields(self):
        """The fields a build depends on (for the build manifest)."""
        return {"repo": self.repo, "commit": self.commit, "tree": self.tree,
                "tree_normalized": self.tree_normalized,
                "artifact_sha256": self.artifact_sha256}


def excluded_directories(tag_paths, shipped):
    """The directories (relative to subdir) whose files the release artifact
    leaves out altogether: for each path of the tag that ``shipped`` (the
    artifact's paths) lacks, its outermost ancestor directory holding no
    shipped file.  A missing file beside shipped ones is not a directory
    left out (the proof of the tree then fails, as it should)."""
    shipped_dirs = set()
    for p in shipped:
        parts = p.split("/")
        shipped_dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    out = set()
    for p in tag_paths:
        if p in shipped:
            continue
        parts = p.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in shipped_dirs:
                out.add(d)
                break
    return tuple(sorted(d for d in out if not any(d.startswith(o + "/") for o in out)))


def _field(table, section, key, kind, pattern=None, where=None):
    name = f"{section}.{key}" if section else key
    if key not in table:
        raise UsageError(f"{where}: missing field '{name}'",
                         hint=f"add '{key} = ...' under [{section}] (see docs/lock.md)")
    value = table[key]
    if kind is str:
        if not isinstance(value, str) or not value:
            raise UsageError(f"{where}: field '{name}' must be a non-empty string, got {value!r}",
                             hint="see docs/lock.md for the format")
        if pattern is not None and not pattern.match(value):
            raise UsageError(f"{where}: field '{name}' is malformed: {value!r} (expected {pattern.pattern})",
                             hint="see docs/lock.md for the format")
    elif kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UsageError(f"{where}: field '{name}' must be a list of strings",
                             hint="see docs/lock.md for the format")
    elif kind is dict:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise UsageError(f"{where}: field '{name}' must be a table of strings",
                             hint="see docs/lock.md for the format")
    return value


def _section(data, name, where):
    sec = data.get(name)
    if not isinstance(sec, dict):
        raise UsageError(f"{where}: missing section [{name}]", hint="see docs/lock.md for the format")
    return sec



def _wheels(art, where):
    table = art.get("wheels", {})
    if not isinstance(table, dict):
        raise UsageError(f"{where}: field 'artifact.wheels' must be a table", hint="see docs/lock.md")
    for name, digest in table.items():
        if versions.wheel(name) is None or not isinstance(digest, str) or not HEX64.match(digest):
            raise UsageError(f"{where}: field 'artifact.wheels' is malformed at {name!r}: {digest!r} "
                             "(expected a wheel file name = a sha256 of 64 hex digits)",
                             hint="see docs/lock.md for the format")
    return dict(table)


def load(path):
    path = Path(path)
    where = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{where}: lock file not found", hint="run from the repository root or pass --lock PATH")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{where}: not valid TOML: {e}", hint="fix the syntax (see docs/lock.md)")
    if data.get("schema") != 1:
        raise UsageError(f"{where}: field 'schema' must be 1, got {data.get('schema')!r}",
                         hint="this tool reads lock schema 1")
    up = _section(data, "upstream", where)
    art = _section(data, "artifact", where)
    rec = _section(data, "artifact", where).get("reconcile")
    if not isinstance(rec, dict):
        raise UsageError(f"{where}: missing section [artifact.reconcile]", hint="see docs/lock.md")
    deps = _section(data, "dependencies", where)
    lock = Lock(
        path=path,
        repo=_field(up, "upstream", "repo", str, where=where),
        tag=_field(up, "upstream", "tag", str, where=where),
        version=_field(up, "upstream", "version", str, VERSION, where=where),
        commit=_field(up, "upstream", "commit", str, HEX40, where=where),
        date=_field(up, "upstream", "date", str, DATE, where=where),
        subdir=_field(up, "upstream", "subdir", str, where=where),
        tree=_field(up, "upstream", "tree", str, HEX40, where=where),
        tree_normalized=_field(up, "upstream", "tree_normalized", str, HEX40, where=where),
        artifact_filename=_field(art, "artifact", "filename", str, WHEEL_NAME, where=where),
        artifact_sha256=_field(art, "artifact", "sha256", str, HEX64, where=where),
        artifact_root=_field(art, "artifact", "root", str, where=where),
        generated=tuple(_field(rec, "artifact.reconcile", "generated", list, where=where)),
        compiled=tuple(_field(rec, "artifact.reconcile", "compiled", list, where=where)),
        symlinks=dict(_field(rec, "artifact.reconcile", "symlinks", dict, where=where)),
        executable=tuple(_field(rec, "artifact.reconcile", "executable", list, where=where)),
        excluded=tuple(_field(rec, "artifact.reconcile", "excluded", list, where=where)
                       if "excluded" in rec else ()),
        dependencies=dict(_field(data, "", "dependencies", dict, where=where)),
        wheels=_wheels(art, where),
    )
    relpath(lock.subdir, "upstream.subdir", where)
    for what in ("generated", "executable", "excluded"):
        for p in getattr(lock, what):
            relpath(p, f"artifact.reconcile.{what}", where)
    for p in lock.symlinks:
        relpath(p, "artifact.reconcile.symlinks", where)
    wheel_version = versions.wheel(lock.artifact_filename)[1]
    if wheel_version != lock.version:
        raise UsageError(f"{where}: field 'artifact.filename' is for version {wheel_version}, "
                         f"but 'upstream.version' is {lock.version}",
                         hint="the artifact must be the release the commit was tagged as")
    dep = missing_dependency(deps)
    if dep:
        raise UsageError(f"{where}: missing field 'dependencies.{dep}'",
                         hint="record the release's own pin from its METADATA (Requires-Dist)")
    return lock


# the runtime pins a lock must record (its [dependencies]), from the release's METADATA
REQUIRED_DEPENDENCIES = ("torch", "transformers", "sglang-kernel", "flashinfer_python")


def missing_dependency(deps):
    """The first of ``REQUIRED_DEPENDENCIES`` that ``deps`` lacks, or None."""
    return next((d for d in REQUIRED_DEPENDENCIES if d not in deps), None)


# The standard layout of upstream.lock, its comments included; render()
# fills it in.  An existing lock given to render() keeps its own.
SKELETON = '''# upstream.lock: the upstream SGLang this overlay applies to (docs/lock.md).
# tools/apply.py verifies every build against these figures; nothing here is
# skipped to make a source pass.
schema = 1

[upstream]
repo = ""
tag = ""
version = ""
commit = ""
date = ""
subdir = ""
# git tree id of python/sglang at the commit (checked for the git source)
tree = ""
# the same tree with every file mode 100644, symlinks kept (checked for
# every source: it is computable from the release artifact too)
tree_normalized = ""

[artifact]
# fetched with `python -m pip download --no-deps` (pip's own configuration
# decides where from), always this exact file, verified by sha256
filename = ""
sha256 = ""
# the directory inside the artifact that is upstream.subdir
root = ""

# The artifact's package directory differs from the tag's python/sglang in
# exactly these ways; they are reconciled before the tree id is proven.
[artifact.reconcile]
# generated at build time, not in git: removed
generated = []
# compiled extension modules, not in git: removed (glob patterns)
compiled = []
# symlinks in git that the artifact holds as regular files
symlinks = {}
# files given mode 100755 (the artifact's own exec bits, see docs/lock.md)
executable = [
]
# directories of the tag's python/sglang that the artifact does not ship (the
# release's exclude-package-data): left out of the trees proven, on every source
excluded = []

# The release's wheels for other Python tags (tools/apply.py --wheel DIR
# --python 3.12): each sha256 recorded the first time the wheel was fetched and
# its python/sglang proven equal to tree_normalized (trust on first use,
# docs/lock.md); checked on every later use.
[artifact.wheels]

# The release's own dependency pins (its METADATA Requires-Dist), recorded so
# that bisect can tell an environment change from a code change.
[dependencies]
'''


def _set(table, key, value):
    """``table[key] = value`` unless it already holds it (so that an
    unchanged value keeps its exact text); lists keep their one-line or
    one-item-a-line layout, tables of strings are written inline."""
    if key in table and table[key].unwrap() == value:
        return
    if isinstance(value, list):
        multiline = key in table and "\n" in table[key].as_string()
        item = tomlkit.array()
        item.extend(value)
        item.multiline(multiline)
    elif isinstance(value, dict):
        item = tomlkit.inline_table()
        for k, v in value.items():
            item.append(SingleKey(k, KeyType.Basic), tomlkit.string(v))
        if value:  # { "a" = "b" } as the lock has always been written
            next(iter(item.value.body))[1].trivia.indent = " "
            item.add(tomlkit.ws(" "))
    else:
        item = value
    table[key] = item


def render(lock, text=None):
    """The lock as upstream.lock's text (``load(render(x)) == x``): the
    standard layout filled in, or with ``text`` (an existing lock's text)
    that text with only the changed values rewritten, its comments kept."""
    doc = tomlkit.parse(SKELETON if text is None else text)
    _set(doc, "schema", 1)
    for name in ("upstream", "artifact", "dependencies"):
        doc.setdefault(name, tomlkit.table())
    doc["artifact"].setdefault("reconcile", tomlkit.table())
    up, art, rec, deps = doc["upstream"], doc["artifact"], doc["artifact"]["reconcile"], doc["dependencies"]
    for key in ("repo", "tag", "version", "commit", "date", "subdir", "tree", "tree_normalized"):
        _set(up, key, getattr(lock, key))
    _set(art, "filename", lock.artifact_filename)
    _set(art, "sha256", lock.artifact_sha256)
    _set(art, "root", lock.artifact_root)
    _set(rec, "generated", list(lock.generated))
    _set(rec, "compiled", list(lock.compiled))
    _set(rec, "symlinks", dict(sorted(lock.symlinks.items())))
    _set(rec, "executable", sorted(lock.executable))
    if "excluded" in rec:
        _set(rec, "excluded", sorted(lock.excluded))
    else:   # a lock written before the field: after executable, before the comments that trail the table
        item = tomlkit.array()
        item.extend(sorted(lock.excluded))
        at = next(i for i, (k, _) in enumerate(rec.value.body) if k is not None and k.key == "executable")
        rec.value._insert_at(at + 1, "excluded", item)
    art.setdefault("wheels", tomlkit.table())
    wheels = art["wheels"]
    for key in [k for k in wheels if k not in lock.wheels]:
        del wheels[key]
    for i, (key, value) in enumerate(sorted(lock.wheels.items())):
        if key in wheels:
            _set(wheels, key, value)
        else:   # before the comments that trail the table (they belong to what follows)
            wheels.value._insert_at(i, key, value)
    for key in [k for k in deps if k not in lock.dependencies]:
        del deps[key]
    for key, value in lock.dependencies.items():
        _set(deps, key, value)
    return tomlkit.dumps(doc)


def write(lock, path, like=None):
    """Write ``lock`` to ``path`` atomically, after checking it loads back;
    the comments and layout of the lock at ``like`` (default: an existing
    lock at ``path``) are kept."""
    import os
    import tempfile
    path = Path(path)
    like = Path(like) if like else path
    text = render(lock, like.read_text(encoding="utf-8") if like.exists() else None)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upstream.lock.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if load(tmp).as_dict() | {"path": ""} != lock.as_dict() | {"path": ""}:
            raise UsageError(f"{path}: the rendered lock does not load back identically", hint="report this")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
