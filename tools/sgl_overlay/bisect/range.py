"""The range of a bisection: published releases or git commits, oldest
first, from the old endpoint to the new one."""
import dataclasses

from .. import clones, gitcmd, release_list
from ..errors import UsageError
from ..versions import release as release_number


@dataclasses.dataclass
class Point:
    id: str                         # a version, or a 40-hex commit
    label: str                      # "sglang 0.5.13", or the commit's subject
    ref: str = ""                   # how the user named it (tag, version), if they did

    def short(self):
        return self.id[:10] if len(self.id) == 40 else self.id


@dataclasses.dataclass
class Range:
    kind: str                       # "releases" | "commits"
    points: list                    # oldest first; points[0] old end, points[-1] new end
    extra_old: list = dataclasses.field(default_factory=list)  # also verified old (a good ref off the base)
    repo: str = ""                  # commits: the repository given with --repo
    notes: list = dataclasses.field(default_factory=list)

    def as_dict(self):
        return {"kind": self.kind, "repo": self.repo, "notes": self.notes,
                "points": [dataclasses.asdict(p) for p in self.points],
                "extra_old": [dataclasses.asdict(p) for p in self.extra_old]}

    @classmethod
    def from_dict(cls, d):
        return cls(kind=d["kind"], repo=d.get("repo", ""), notes=list(d.get("notes", [])),
                   points=[Point(**p) for p in d["points"]], extra_old=[Point(**p) for p in d.get("extra_old", [])])

    def point(self, pid):
        return next(p for p in self.extra_old + self.points if p.id == pid)


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
    return Range("releases", pts)


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
    rng = Range("commits", pts, repo=repo)
    if old != base:
        rng.extra_old = [Point(old, subj.get(old, ""), old_ref)]
        rng.notes.append(f"{old_opt} {old_ref} ({old[:10]}) is not an ancestor of {new_opt} {new_ref}: bisecting from "
                         f"their merge base {base[:10]} ({subj.get(base, '')!r}), which is tested too")
    return rng
