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
