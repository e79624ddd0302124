"""The range of a bisection: published releases or git commits, oldest
first, from the old endpoint to the new one.  What differs by kind (how a
point is named, where its tree comes from, the command line that names the
range, whether a first-bad answer can be narrowed further) is a method of
the range's class, ``ReleaseRange`` or ``CommitRange``."""
import abc
import dataclasses
import enum
from pathlib import Path
from typing import ClassVar

from .. import base_tree, clones, gitcmd, release_list, release_trees
from ..errors import UsageError
from ..versions import release as release_number


class RangeKind(enum.StrEnum):
    RELEASES = "releases"
    COMMITS = "commits"


@dataclasses.dataclass(frozen=True)
class Point:
    id: str                         # a version, or a 40-hex commit
    label: str                      # "sglang 0.5.13", or the commit's subject
    ref: str = ""                   # how the user named it (tag, version), if they did

    def short(self):
        return self.id[:10] if len(self.id) == 40 else self.id

    def to_json(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Range(abc.ABC):
    points: tuple                   # oldest first; points[0] old end, points[-1] new end
    extra_old: tuple = ()           # also verified old (a good ref off the base)
    repo: str = ""                  # commits: the repository given with --repo
    notes: tuple = ()
    kind: ClassVar[RangeKind]

    def __post_init__(self):
        for name in ("points", "extra_old", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def as_dict(self):
        return {"kind": self.kind, "repo": self.repo, "notes": list(self.notes),
                "points": [p.to_json() for p in self.points],
                "extra_old": [p.to_json() for p in self.extra_old]}

    @staticmethod
    def from_dict(d):
        cls = {c.kind: c for c in (ReleaseRange, CommitRange)}[RangeKind(d["kind"])]
        return cls(repo=d.get("repo", ""), notes=d.get("notes", []),
                   points=[Point(**p) for p in d["points"]], extra_old=[Point(**p) for p in d.get("extra_old", [])])

    def point(self, pid):
        return next(p for p in self.extra_old + self.points if p.id == pid)

    @abc.abstractmethod
    def name(self, point: Point) -> str:
        """The point as a verdict's words name it."""

    @abc.abstractmethod
    def cli_args(self, public_repo: str) -> list:
        """The command-line options that give this range again."""

    def commit_refs(self, old_id: str, new_id: str):
        """(old ref, new ref) of the commit range between two points of a
        first-bad answer, to narrow it further; None if there is nothing finer."""
        return None

    def pristine(self, point: Point, cache, say):
        """The point's pristine tree, ready without the tree cache, or None."""
        return None

    @abc.abstractmethod
    def checkout(self, point: Point, repo: Path, lock, cache, say) -> None:
        """Make ``repo`` a git repository whose HEAD holds the point's tree."""


class ReleaseRange(Range):
    kind = RangeKind.RELEASES

    def name(self, point):
        return point.id

    def cli_args(self, public_repo):
        return ["--releases", f"{self.points[0].id}..{self.points[-1].id}"]

    def commit_refs(self, old_id, new_id):
        return "v" + old_id, "v" + new_id

    def pristine(self, point, cache, say):
        return release_trees.release_tree(point.id, cache, say)

    def checkout(self, point, repo, lock, cache, say):
        base_tree.base_from_release(point.id, repo, lock.subdir, lock.symlinks, cache, say)


class CommitRange(Range):
    kind = RangeKind.COMMITS

    def name(self, point):
        return f"{point.short()} ({point.label})"

    def cli_args(self, public_repo):
        old = self.extra_old[0] if self.extra_old else self.points[0]
        return ["--repo", public_repo, "--good", old.ref or old.id, "--bad", self.points[-1].ref or self.points[-1].id]

    def checkout(self, point, repo, lock, cache, say):
        bare, _ = clones.bare_clone(self.repo, cache, None)
        gitcmd.init(repo)
        (repo / ".git" / "objects" / "info" / "alternates").write_text(str(Path(bare).resolve() / "objects") + "\n")
        gitcmd.run(repo, "update-ref", "refs/heads/upstream", point.id)
        gitcmd.run(repo, "reset", "--quiet", "--hard", point.id)


def release_range(spec, progress=None):
    """``A..B`` over the published releases, both ends included."""
    if spec.count("..") != 1 or not all(spec.split("..")):
        raise UsageError(f"--releases {spec!r} is not of the form OLD..NEW", hint="e.g. --releases 0.5.9..0.5.14")
    lo, hi = spec.split("..")
    for v in (lo, hi):
        if release_number(v) is None:
            raise UsageError(f"--releases {spec!r}: {v!r} is not a release number", hint="e.g. 0.5.12.post1")
    if release_number(lo) >= release_number(hi):
        raise UsageError(f"--releases {spec!r} is empty: {lo} is not older than {hi}",
                         hint="give the older release first (with --fixed too: OLD..NEW)")
    versions = release_list.list_releases(progress)
    for v in (lo, hi):
        if v not in versions:
            near = [x for x in versions if x.rsplit(".", 1)[0] == v.rsplit(".", 1)[0]] or versions[-5:]
            raise UsageError(f"--releases {spec!r}: sglang {v} is not a published release",
                             hint=f"published releases near it: {', '.join(near)} (python -m pip index versions sglang)")
    lk, hk = release_number(lo), release_number(hi)
    pts = [Point(v, f"sglang {v}", v) for v in versions if lk <= release_number(v) <= hk]
    return ReleaseRange(pts)


def _resolve(bare, ref, opt, repo):
    p = gitcmd.run(bare, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if p.returncode != 0 or not p.stdout.strip():
        raise UsageError(f"{opt} {ref!r}: no such commit, branch or tag in {repo}",
                         hint="check the name (git ls-remote REPO), or give a full commit id")
    return p.stdout.strip()


def _subjects(bare, shas):
    out = gitcmd.run(bare, "log", "--no-walk=unsorted", "--format=%H %s", *shas).stdout if shas else ""
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines())


def commit_range(repo, old_ref, new_ref, all_parents=False, old_opt="--good", new_opt="--bad",
                 cache=None, progress=None):
    """The commits from ``old_ref`` to ``new_ref``: first-parent by default,
    along the ancestry path.  When ``old_ref`` is not an ancestor of
    ``new_ref`` (release tags sit on release branches), the range starts at
    their merge base, and ``old_ref`` itself is verified too."""
    bare, _ = clones.fresh_clone(repo, cache, progress)
    old = _resolve(bare, old_ref, old_opt, repo)
    new = _resolve(bare, new_ref, new_opt, repo)
    if old == new:
        raise UsageError(f"{old_opt} {old_ref} and {new_opt} {new_ref} are the same commit {old[:12]}: the range is empty",
                         hint="give two different commits")
    base = gitcmd.run(bare, "merge-base", old, new, check=False).stdout.strip()
    if not base:
        raise UsageError(f"{old_opt} {old_ref} and {new_opt} {new_ref} share no history in {repo}",
                         hint="both refs must come from the same repository")
    if base == new:
        raise UsageError(f"{new_opt} {new_ref} is an ancestor of {old_opt} {old_ref}: the range runs backwards",
                         hint="swap them, or pass --fixed to look for where it started working")
    args = ["rev-list", "--reverse", "--ancestry-path"] + ([] if all_parents else ["--first-parent"])
    chain = gitcmd.run(bare, *args, f"{base}..{new}").stdout.split()
    if not chain or chain[-1] != new:
        chain = [c for c in chain if c != new] + [new]
    subj = _subjects(bare, [base] + chain + ([old] if old != base else []))
    pts = [Point(base, subj.get(base, ""), old_ref if base == old else "")]
    pts += [Point(c, subj.get(c, ""), new_ref if c == new else "") for c in chain]
    if old == base:
        return CommitRange(pts, repo=repo)
    return CommitRange(pts, repo=repo, extra_old=[Point(old, subj.get(old, ""), old_ref)],
                       notes=[f"{old_opt} {old_ref} ({old[:10]}) is not an ancestor of {new_opt} {new_ref}: bisecting "
                              f"from their merge base {base[:10]} ({subj.get(base, '')!r}), which is tested too"])
