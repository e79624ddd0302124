"""upstream.lock: what upstream SGLang this overlay applies to.

The lock is TOML.  Every field is validated on load; a missing or malformed
field is a UsageError (exit 2) that names the field.  See docs/lock.md.
"""
import dataclasses
import re
import tomllib
from pathlib import Path

from .errors import UsageError
from .paths import relpath

HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
WHEEL_NAME = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-(?P<tags>[^-]+-[^-]+-[^-]+)\.whl$")
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

    @property
    def wheel_tags(self):
        return WHEEL_NAME.match(self.artifact_filename).group("tags")

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["path"] = str(self.path)
        for k in ("generated", "compiled", "executable"):
            d[k] = list(d[k])
        return d

    def digest_fields(self):
        """The fields a build depends on (for the build manifest)."""
        return {"repo": self.repo, "commit": self.commit, "tree": self.tree,
                "tree_normalized": self.tree_normalized,
                "artifact_sha256": self.artifact_sha256}


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
        dependencies=dict(_field(data, "", "dependencies", dict, where=where)),
    )
    relpath(lock.subdir, "upstream.subdir", where)
    for what in ("generated", "executable"):
        for p in getattr(lock, what):
            relpath(p, f"artifact.reconcile.{what}", where)
    for p in lock.symlinks:
        relpath(p, "artifact.reconcile.symlinks", where)
    m = WHEEL_NAME.match(lock.artifact_filename)
    if m.group("version") != lock.version:
        raise UsageError(f"{where}: field 'artifact.filename' is for version {m.group('version')}, "
                         f"but 'upstream.version' is {lock.version}",
                         hint="the artifact must be the release the commit was tagged as")
    for dep in ("torch", "transformers", "sglang-kernel", "flashinfer_python"):
        if dep not in deps:
            raise UsageError(f"{where}: missing field 'dependencies.{dep}'",
                             hint="record the release's own pin from its METADATA (Requires-Dist)")
    return lock


def _toml_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(lock):
    """The lock as upstream.lock's text (``load(render(x)) == x``)."""
    execs = "".join(f"    {_toml_str(e)},\n" for e in sorted(lock.executable))
    links = ", ".join(f"{_toml_str(k)} = {_toml_str(v)}" for k, v in sorted(lock.symlinks.items()))
    deps = "".join(f"{k} = {_toml_str(v)}\n" for k, v in lock.dependencies.items())
    return f'''# upstream.lock: the upstream SGLang this overlay applies to (docs/lock.md).
# tools/apply.py verifies every build against these figures; nothing here is
# skipped to make a source pass.
schema = 1

[upstream]
repo = {_toml_str(lock.repo)}
tag = {_toml_str(lock.tag)}
version = {_toml_str(lock.version)}
commit = {_toml_str(lock.commit)}
date = {_toml_str(lock.date)}
subdir = {_toml_str(lock.subdir)}
# git tree id of python/sglang at the commit (checked for the git source)
tree = {_toml_str(lock.tree)}
# the same tree with every file mode 100644, symlinks kept (checked for
# every source: it is computable from the release artifact too)
tree_normalized = {_toml_str(lock.tree_normalized)}

[artifact]
# fetched with `python -m pip download --no-deps` (pip's own configuration
# decides where from), always this exact file, verified by sha256
filename = {_toml_str(lock.artifact_filename)}
sha256 = {_toml_str(lock.artifact_sha256)}
# the directory inside the artifact that is upstream.subdir
root = {_toml_str(lock.artifact_root)}

# The artifact's package directory differs from the tag's python/sglang in
# exactly these ways; they are reconciled before the tree id is proven.
[artifact.reconcile]
# generated at build time, not in git: removed
generated = [{", ".join(_toml_str(g) for g in lock.generated)}]
# compiled extension modules, not in git: removed (glob patterns)
compiled = [{", ".join(_toml_str(c) for c in lock.compiled)}]
# symlinks in git that the artifact holds as regular files
symlinks = {{ {links} }}
# files given mode 100755 (the artifact's own exec bits, see docs/lock.md)
executable = [
{execs}]

# The release's own dependency pins (its METADATA Requires-Dist), recorded so
# that bisect can tell an environment change from a code change.
[dependencies]
{deps}'''


def write(lock, path):
    """Write ``lock`` to ``path`` atomically, after checking it loads back."""
    import os
    import tempfile
    text = render(lock)
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upstream.lock.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        if load(tmp).as_dict() | {"path": ""} != lock.as_dict() | {"path": ""}:
            raise UsageError(f"{path}: the rendered lock does not load back identically", hint="report this")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
