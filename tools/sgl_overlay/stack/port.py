"""The port session: the stack carried onto a newer upstream release patch
by patch, stopping for a person where git cannot, resumable like
``git rebase`` (``tools/stack.py port``; docs/stack.md, "Port session").

The session lives in the checkout's ``build/port/``: ``tree/`` (a git work
tree prepared as ``rebase`` prepares it: the new upstream on ``upstream``,
branch ``patched``, the old stack as ``refs/sgl-overlay/old``),
``session.json`` (the state, written atomically), ``upstream.lock.new`` (the
new lock, computed and verified at the start as ``rebase --write`` does),
and, at the end, ``stage/`` and ``range-diff.txt``.  Recorded conflict
resolutions live beside it in ``build/port-rr-cache/`` (the tree's
``.git/rr-cache`` points there), so they outlive an ``--abort`` and a
finished session and a second run of the same move reuses them.

The end writes patches/ and upstream.lock so that a kill at any instant
leaves each whole: the new patches/ is staged, the phase ``finishing`` is
recorded with the staged digests, patches/ is swapped in with one rename
exchange, the lock replaced with one rename, and the phase ``done``
recorded; ``--continue`` or ``--status`` after a kill in ``finishing``
rolls forward, judged by digests alone (``finish_steps``).

The state and the results are frozen dataclasses and enums; the decisions
(``after_attempt``, ``continue_step``, ``skip_step``, ``finish_steps``,
``name_commits``) are pure functions of the state and of what git reported
(``TreeFacts``), apart from the git I/O below them.
"""
import dataclasses
import enum
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .. import builder, clones, gitcmd, lock as lockmod, locking, series
from ..errors import IntegrityError, UsageError
from .classify import LEAVES_SERIES, RESOLVED, Status
from .lint import lint, lint_series
from .rebase import OLD, OLD_BASE, Attempt, attempt, merged_upstream, new_lock, prepare_tree, unmerged
from .refresh import Change, compare, stage_patches
from .texts import slug

SESSION = Path("build") / "port"
RR_CACHE = Path("build") / "port-rr-cache"
SCHEMA = 1


@dataclasses.dataclass(frozen=True)
class Places:
    """Where a checkout's session lives."""
    root: Path

    @property
    def session(self):
        return self.root / SESSION

    @property
    def tree(self):
        return self.session / "tree"

    @property
    def state(self):
        return self.session / "session.json"

    @property
    def new_lock(self):
        return self.session / "upstream.lock.new"

    @property
    def stage(self):
        return self.session / "stage"

    @property
    def staged_patches(self):
        return self.stage / "patches"

    @property
    def range_diff(self):
        return self.session / "range-diff.txt"

    @property
    def rr_cache(self):
        return self.root / RR_CACHE

    @property
    def patches(self):
        return self.root / "patches"

    @property
    def lock(self):
        return self.root / "upstream.lock"


# --------------------------------------------------------------------------
# the state

class Phase(enum.StrEnum):
    APPLYING = "applying"      # going through the series (a run killed here resumes with --continue)
    STOPPED = "stopped"        # a patch needs the person
    FINISHING = "finishing"    # the new patches/ and lock are staged and being put in place
    DONE = "done"              # patches/ and upstream.lock are the ported ones


class Resolution(enum.StrEnum):
    GIT = "git"                # git applied it (strict or 3-way), or found nothing left to carry
    RERERE = "rerere"          # git's conflict, resolved by a recorded resolution (git rerere)
    PERSON = "person"          # resolved by a person during a stop
    SKIPPED = "skipped"        # dropped by a person (--skip --reason)


class Outcome(enum.StrEnum):
    STOPPED = "stopped"        # exit 1: a patch needs the person
    FINISHED = "finished"      # exit 0: patches/ and upstream.lock are the ported ones
    ABORTED = "aborted"        # exit 0: the session is gone, patches/ and the lock as they were
    IN_PROGRESS = "in-progress"   # --status of a session a killed run left applying


@dataclasses.dataclass(frozen=True)
class Carried:
    """One commit of the session tree that becomes a patch file."""
    name: str
    commit: str
    subject: str

    def to_json(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PatchResult:
    """What became of one patch of the old series."""
    patch: str
    index: int
    subject: str
    status: Status             # what git reported
    resolution: Resolution
    commits: tuple = ()        # Carried, in tree order: its own commit, and any a person added after it
    reason: str = ""           # why it left the series (it has no commits then)
    upstream_commit: str = ""

    def to_json(self):
        return {"patch": self.patch, "index": self.index, "subject": self.subject, "status": str(self.status),
                "resolution": str(self.resolution), "commits": [c.to_json() for c in self.commits],
                "reason": self.reason, "upstream_commit": self.upstream_commit}

    @classmethod
    def from_json(cls, d):
        return cls(d["patch"], d["index"], d["subject"], Status(d["status"]), Resolution(d["resolution"]),
                   tuple(Carried(**c) for c in d["commits"]), d["reason"], d["upstream_commit"])


@dataclasses.dataclass(frozen=True)
class Stop:
    """Where the session waits for the person."""
    index: int
    patch: str
    subject: str
    status: Status             # conflict or probably-upstream
    head: str                  # HEAD when it stopped (the patch not applied)
    am: bool                   # git am's stopped state was left in the tree
    conflicted: tuple = ()     # the paths git left unmerged
    reused: tuple = ()         # the paths a recorded resolution resolved (the rest did not)
    failure: dict | None = None   # builder.diagnose()'s report
    git_am: str = ""           # what git am --3way said
    old_commit: str = ""       # the patch's commit in the old series (refs/sgl-overlay/old), in the tree

    def to_json(self):
        return {**dataclasses.asdict(self), "status": str(self.status), "conflicted": list(self.conflicted),
                "reused": list(self.reused)}

    @classmethod
    def from_json(cls, d):
        return cls(**{**d, "status": Status(d["status"]), "conflicted": tuple(d["conflicted"]),
                      "reused": tuple(d["reused"])})


@dataclasses.dataclass(frozen=True)
class RangeDiff:
    """One pair of git range-diff's output: old patch ``old`` (1-based, None:
    none) against new commit ``new``; ``mark`` is git's (= ! < >)."""
    old: int | None
    new: int | None
    mark: str
    subject: str
    lines: tuple               # the header line and the diff of the diffs

    def to_json(self):
        return {"old": self.old, "new": self.new, "mark": self.mark, "subject": self.subject,
                "lines": list(self.lines)}

    @classmethod
    def from_json(cls, d):
        return cls(d["old"], d["new"], d["mark"], d["subject"], tuple(d["lines"]))


@dataclasses.dataclass(frozen=True)
class Staged:
    """The end, staged: the digests patches/ and the lock will have, and what
    each patch file becomes."""
    patches_digest: str
    lock_digest: str
    changes: tuple             # (name, Change), the new series' files then the removed ones

    def to_json(self):
        return {"patches_digest": self.patches_digest, "lock_digest": self.lock_digest,
                "changes": [[n, str(c)] for n, c in self.changes]}

    @classmethod
    def from_json(cls, d):
        return cls(d["patches_digest"], d["lock_digest"], tuple((n, Change(c)) for n, c in d["changes"]))


@dataclasses.dataclass(frozen=True)
class Session:
    onto: str                  # the release version
    repo: str                  # where the tag was read (--repo, else the lock's)
    old_version: str
    lock_digest: str           # sha256 of upstream.lock at the start
    patches_digest: str        # digest of patches/ at the start (dir_digest)
    new_lock_digest: str       # sha256 of upstream.lock.new
    new_base: str              # the upstream commit of the tree
    merged: dict               # {patch: upstream commit with its patch-id}
    phase: Phase
    head: str                  # the tree's HEAD after the last patch recorded
    results: tuple = ()        # PatchResults, in series order, so far
    stop: Stop | None = None
    staged: Staged | None = None
    range_diff: tuple = ()     # RangeDiffs (at the end)

    @property
    def label(self):
        return f"v{self.onto}"

    def to_json(self):
        return {"schema": SCHEMA, "onto": self.onto, "repo": self.repo, "old_version": self.old_version,
                "lock_digest": self.lock_digest, "patches_digest": self.patches_digest,
                "new_lock_digest": self.new_lock_digest, "new_base": self.new_base, "merged": self.merged,
                "phase": str(self.phase), "head": self.head, "results": [r.to_json() for r in self.results],
                "stop": self.stop.to_json() if self.stop else None,
                "staged": self.staged.to_json() if self.staged else None,
                "range_diff": [r.to_json() for r in self.range_diff]}

    @classmethod
    def from_json(cls, d):
        if d.get("schema") != SCHEMA:
            raise ValueError(f"schema {d.get('schema')!r}, this tool reads {SCHEMA}")
        return cls(d["onto"], d["repo"], d["old_version"], d["lock_digest"], d["patches_digest"],
                   d["new_lock_digest"], d["new_base"], dict(d["merged"]), Phase(d["phase"]), d["head"],
                   tuple(PatchResult.from_json(r) for r in d["results"]),
                   Stop.from_json(d["stop"]) if d["stop"] else None,
                   Staged.from_json(d["staged"]) if d["staged"] else None,
                   tuple(RangeDiff.from_json(r) for r in d["range_diff"]))


# --------------------------------------------------------------------------
# what git reported, and the pure decisions on it

@dataclasses.dataclass(frozen=True)
class TreeFacts:
    """The session tree as git reports it, relative to a stop."""
    am: bool                   # git am's stopped state is there
    unmerged: tuple            # paths unmerged in the index
    marked: tuple              # files with conflict markers added since the stop
    staged: tuple              # paths whose index differs from HEAD
    unstaged: tuple            # tracked paths whose work tree differs from the index
    untracked: tuple
    commits: tuple             # (commit, subject) from the stop's HEAD to HEAD, oldest first
    descends: bool             # HEAD descends from the stop's HEAD
    merges: tuple              # merge commits among them


class Step(enum.StrEnum):
    RECORD = "record"          # git resolved it: record it and go on
    REUSE = "reuse"            # a recorded resolution resolved every conflict: commit it and go on
    STOP = "stop"              # the person must


def after_attempt(a: Attempt, facts: TreeFacts | None = None, reused=()):
    """What to do after ``attempt`` (kept conflicts): ``facts`` of the tree
    and the paths git said a recorded resolution resolved (``reused``)."""
    if not a.stopped:
        return Step.RECORD if a.status in RESOLVED else Step.STOP
    if facts is not None and reused and facts.staged and not facts.unmerged and not facts.marked:
        return Step.REUSE
    return Step.STOP


class Act(enum.StrEnum):
    AM_CONTINUE = "am-continue"   # the resolution is staged, git am still stopped: git am --continue commits it
    AM_QUIT = "am-quit"           # committed with git am's state still there: git am --quit keeps HEAD
    TAKE = "take"                 # committed, git am finished: take the commits


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A verb refused in this state (exit 2, or 3 for ``integrity``)."""
    message: str
    hint: str
    integrity: bool = False

    def error(self):
        return (IntegrityError if self.integrity else UsageError)(self.message, hint=self.hint)


def _files(paths, limit=8):
    paths = list(paths)
    return ", ".join(paths[:limit]) + (f" (and {len(paths) - limit} more)" if len(paths) > limit else "")


def continue_step(stop: Stop, f: TreeFacts, tree_shown="build/port/tree"):
    """How ``--continue`` takes the person's resolution of ``stop``, or why it cannot."""
    g = f"git -C {tree_shown}"
    if f.unmerged:
        return Refusal(f"{stop.patch}: unmerged paths remain in {tree_shown}: {_files(f.unmerged)}",
                       f"resolve them, then {g} add FILE... (and {g} am --continue, or commit), then --continue")
    if f.marked:
        return Refusal(f"{stop.patch}: conflict markers (<<<<<<< ======= >>>>>>>) remain in {tree_shown}: "
                       f"{_files(f.marked)}", f"edit them out, {g} add FILE..., then --continue")
    if not f.descends:
        return Refusal(f"{stop.patch}: HEAD of {tree_shown} no longer descends from {stop.head[:12]}, where the "
                       "session stopped", f"put it back ({g} reset --hard {stop.head[:12]}), or --abort")
    if f.merges:
        return Refusal(f"{stop.patch}: merge commit {f.merges[0][:12]} since the stop: a series is linear",
                       f"make plain commits ({g} reset --soft {stop.head[:12]} and commit again)")
    if f.commits:
        if f.staged or f.unstaged:
            return Refusal(f"{stop.patch}: uncommitted changes in {tree_shown} besides the commits made since the "
                           f"stop: {_files(f.staged + f.unstaged)}",
                           f"commit them ({g} commit -a) or discard them ({g} checkout -- FILE), then --continue")
        return Act.AM_QUIT if f.am else Act.TAKE
    if f.am and f.staged:
        if f.unstaged:
            return Refusal(f"{stop.patch}: changes not staged in {tree_shown}: {_files(f.unstaged)}",
                           f"{g} add them (or discard them: {g} checkout -- FILE), then --continue")
        return Act.AM_CONTINUE
    return Refusal(f"{stop.patch}: nothing was committed or staged for it in {tree_shown}",
                   f"resolve the conflict and {g} add the files (new files too), then --continue; or, if "
                   "nothing of it is left to carry, --skip --reason TEXT")


def skip_step(stop: Stop, f: TreeFacts, tree_shown="build/port/tree"):
    """None when ``--skip`` may drop ``stop``'s patch, else why not."""
    if f.commits:
        return Refusal(f"{stop.patch}: {len(f.commits)} commit(s) were made in {tree_shown} since the stop; "
                       "--skip would discard them",
                       f"--continue keeps them (they carry the patch), or drop them first (git -C {tree_shown} "
                       f"reset --hard {stop.head[:12]}) and --skip again")
    return None


def name_commits(patch_name, patch_subject, commits, taken):
    """The patch files of the commits made during a stop (``(commit,
    subject)``, in order): the one with the patch's subject (else the first)
    keeps ``patch_name``; every other is a new patch named from its subject
    as refresh names one (``slug``).  A Refusal if such a name is taken."""
    own = next((c for c, s in commits if s == patch_subject), commits[0][0])
    out, taken = [], set(taken)
    for c, s in commits:
        name = patch_name if c == own else slug(s) + ".patch"
        if c != own and name in taken:
            return Refusal(f"commit {c[:12]} ({s!r}) would become patches/{name}, which is already a patch",
                           "reword its subject (git commit --amend, or git rebase -i in the session tree), "
                           "then --continue")
        taken.add(name)
        out.append(Carried(name, c, s))
    return tuple(out)


class Put(enum.StrEnum):
    SWAP_PATCHES = "swap-patches"
    REPLACE_LOCK = "replace-lock"


def finish_steps(session: Session, patches_now, lock_now, staged_patches, staged_lock):
    """What remains of the end, from the digests alone: patches/ and
    upstream.lock now, and the staged new ones (None: absent).  Each of
    patches/ and the lock must be the session's old content or its new
    one; anything else is a Refusal (integrity)."""
    st = session.staged
    steps = []
    if patches_now != st.patches_digest:
        if patches_now not in (session.patches_digest, None) or staged_patches != st.patches_digest:
            return Refusal("patches/ is neither what the port session started from nor what it staged "
                           f"(digest {(patches_now or 'none')[:12]}): it changed during the finish",
                           "compare it with build/port/stage/patches (the new one, or after the swap the old "
                           "one); put back what you want by hand, then --abort", integrity=True)
        steps.append(Put.SWAP_PATCHES)
    if lock_now != st.lock_digest:
        if lock_now != session.lock_digest or staged_lock != st.lock_digest:
            return Refusal("upstream.lock is neither the one the port session started from nor the new one "
                           "(sha256 {})".format((lock_now or "none")[:12]),
                           "compare it with build/port/upstream.lock.new; put back what you want by hand, "
                           "then --abort", integrity=True)
        steps.append(Put.REPLACE_LOCK)
    return tuple(steps)


def next_steps(stop: Stop, tree_shown, tool):
    """The commands that take the session on from ``stop``."""
    g = f"git -C {tree_shown}"
    first = []
    if stop.conflicted:
        first.append(f"edit the conflicted files in {tree_shown} (the <<<<<<< ======= >>>>>>> blocks)")
        first.append(f"{g} add FILE...")
    elif stop.am:
        first.append(f"apply the change by hand in {tree_shown} (e.g. {g} apply --reject "
                     f"--3way $({g} rev-parse --git-path rebase-apply/patch)), then {g} add FILE...")
    else:
        first.append(f"apply the change by hand in {tree_shown} and {g} add FILE...")
    commit = f"{g} commit -C {stop.old_commit[:12]}" if stop.old_commit else f"{g} commit"
    first.append(f"{g} am --continue   (or: {commit}, which keeps its message and author; "
                 "more commits after it become new patches)" if stop.am else
                 f"{commit}   (keeps its message and author; more commits after it become new patches)")
    first.append(f"{tool} --continue")
    return (first, [f"{tool} --skip --reason \"why {stop.patch} is no longer needed\"   (drops it)",
                    f"{tool} --abort   (patches/ and upstream.lock stay as they are)"])


# --------------------------------------------------------------------------
# digests, the state file

def file_digest(path):
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def dir_digest(path):
    """sha256 over every file (name, bytes) and symlink (name, target)
    under ``path``; None when it does not exist."""
    path = Path(path)
    if not path.is_dir():
        return None
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path).as_posix().encode()
        if p.is_symlink():
            h.update(b"l\0" + rel + b"\0" + os.readlink(p).encode() + b"\0")
        elif p.is_file():
            data = p.read_bytes()
            h.update(b"f\0" + rel + b"\0%d\0" % len(data) + data)
    return h.hexdigest()


def _atomic_write(path, text):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save(places, session):
    """Write the state (temp file + rename: whole or not at all)."""
    write_state(places.state, session)
    return session


def write_state(path, session):
    _atomic_write(Path(path), json.dumps(session.to_json(), indent=2, sort_keys=True) + "\n")


def load(places):
    """The session in ``places``; UsageError (exit 2) when there is none."""
    if not places.session.exists():
        raise UsageError(f"no port session in {places.session}",
                         hint="start one: python tools/stack.py port --onto VERSION [--repo URL_OR_PATH]")
    try:
        return Session.from_json(json.loads(places.state.read_text()))
    except FileNotFoundError:
        raise UsageError(f"{places.session} holds no session.json: it is not a port session",
                         hint="move that folder away (or delete it), then start again") from None
    except (ValueError, KeyError, TypeError) as e:
        raise IntegrityError(f"{places.state} is damaged: {e}",
                             hint="python tools/stack.py port --abort removes the session (patches/ and "
                                  "upstream.lock are never written before the phase 'finishing')") from None


# --------------------------------------------------------------------------
# git I/O

MARKER = re.compile(r"^(?:<{7}|>{7})(?: |$)|^={7}$")
REUSED = re.compile(r"^(?:Staged|Resolved) '(.+)' using previous resolution\.$", re.M)


def _lines(text):
    return tuple(l for l in text.split("\n") if l)


def marked_files(tree, since):
    """Files whose lines added since commit ``since`` (work tree included)
    hold conflict markers."""
    out = gitcmd.run(tree, "diff", "-U0", "--no-ext-diff", "--no-textconv", since, "--").stdout
    files, current, in_hunk = [], None, False
    for line in out.split("\n"):
        if line.startswith("diff --git "):
            current, in_hunk = None, False
        elif not in_hunk and line.startswith("+++ "):
            current = line[6:] if line.startswith("+++ b/") else None
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and current and line.startswith("+") and MARKER.match(line[1:]) and current not in files:
            files.append(current)
    return tuple(files)


def am_in_progress(tree):
    return (Path(tree) / gitcmd.out(tree, "rev-parse", "--git-path", "rebase-apply") / "applying").exists()


def facts(tree, since):
    """TreeFacts of ``tree`` relative to commit ``since`` (a stop's HEAD)."""
    descends = gitcmd.run(tree, "merge-base", "--is-ancestor", since, "HEAD", check=False).returncode == 0
    commits = ()
    merges = ()
    if descends:
        log = gitcmd.out(tree, "log", "--reverse", "--format=%H%x00%s", f"{since}..HEAD")
        commits = tuple(tuple(l.split("\0", 1)) for l in _lines(log))
        merges = _lines(gitcmd.out(tree, "rev-list", "--merges", f"{since}..HEAD"))
    records = iter(gitcmd.run(tree, "status", "--porcelain", "-z", "--untracked-files=all").stdout.split("\0"))
    conflicted = unmerged(tree)
    staged, unstaged, untracked = [], [], []
    for rec in records:
        if len(rec) < 4:
            continue
        x, y, path = rec[0], rec[1], rec[3:]
        if x in "RC":
            next(records, None)                 # -z: a rename's old path is the next record
        if x == "?":
            untracked.append(path)
        elif path not in conflicted:
            if x != " ":
                staged.append(path)
            if y != " ":
                unstaged.append(path)
    return TreeFacts(am=am_in_progress(tree), unmerged=conflicted, marked=marked_files(tree, since),
                     staged=tuple(staged), unstaged=tuple(unstaged), untracked=tuple(untracked),
                     commits=commits, descends=descends, merges=merges)


def _commit_problems(tree, carried, label):
    """Every commit's mail must be a patch the series accepts (python/
    paths, the headers, a body, Upstream-Status and Topic)."""
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-port-") as t:
        for c in carried:
            f = Path(t) / c.name
            f.write_text(gitcmd.run(tree, "format-patch", "-1", "--stdout", "--no-signature", c.commit).stdout)
            where = f"commit {c.commit[:12]} ({c.subject!r}, to be patches/{c.name})"
            try:
                p = series.parse_patch(f, 1, where=where)
            except UsageError as e:
                return Refusal(e.message, f"{e.hint}; change the commit in {label} (git commit --amend, or "
                                          "git rebase -i), then --continue")
            problems = lint_series([p])
            if problems:
                first = problems[0]
                return Refusal(f"{where}: {first['error']}",
                               f"{first['hint']}: in that commit, e.g. git -C {label} commit --amend "
                               "(git rebase -i for an earlier one), then --continue")
    return None


def _configure_rerere(tree, places):
    """rerere on, its recorded resolutions kept outside the session (a
    relative link, so that the checkout may move)."""
    gitcmd.run(tree, "config", "rerere.enabled", "true")
    gitcmd.run(tree, "config", "rerere.autoUpdate", "true")
    places.rr_cache.mkdir(parents=True, exist_ok=True)
    git_dir = Path(tree) / ".git"
    link = git_dir / "rr-cache"
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    # the start's scratch folder sits where build/port will: the same relative target
    os.symlink(os.path.relpath(places.rr_cache, places.tree / ".git"), link)


def _record_resolutions(tree):
    """Let rerere record what the person resolved so far (harmless when
    nothing is)."""
    gitcmd.run(tree, "rerere", check=False)


RANGE_HEADER = re.compile(r"^\s*(\d+|-+):\s+(\S+) ([=!<>]) \s*(\d+|-+):\s+(\S+) ?(.*)$")


def parse_range_diff(text):
    out, cur = [], None
    for line in text.split("\n"):
        m = RANGE_HEADER.match(line)
        if m:
            cur = [int(m[1]) if m[1].isdigit() else None, int(m[4]) if m[4].isdigit() else None, m[3], m[6], [line]]
            out.append(cur)
        elif cur is not None and line:
            cur[4].append(line)
    return tuple(RangeDiff(o, n, mark, s, tuple(lines)) for o, n, mark, s, lines in out)


def range_diff(tree):
    """``git range-diff`` of the old series against the new one (text)."""
    return gitcmd.run(tree, "range-diff", "--no-color", f"{OLD_BASE}..{OLD}", "upstream..HEAD").stdout


# --------------------------------------------------------------------------
# the verbs

@dataclasses.dataclass(frozen=True)
class Report:
    outcome: Outcome
    places: Places
    session: Session | None = None
    facts: TreeFacts | None = None     # of a stop, now
    lint: tuple = ()                   # lint findings after the finish (dicts)
    note: str = ""

    @property
    def exit_code(self):
        """0 finished or aborted; 1 the session waits for the person (a stop,
        or a run killed while applying: --continue)."""
        return 1 if self.outcome in (Outcome.STOPPED, Outcome.IN_PROGRESS) else 0

    def patches(self):
        """Per old patch: its result, what its files became, its range-diff lines."""
        s = self.session
        changes = dict(s.staged.changes) if s and s.staged else {}
        out = []
        new_index = {}
        for r in (s.results if s else ()):
            for c in r.commits:
                new_index[len(new_index) + 1] = r.patch
        for r in (s.results if s else ()):
            d = r.to_json()
            d["reused"] = r.resolution is Resolution.RERERE
            d["skipped"] = r.resolution is Resolution.SKIPPED
            for c in d["commits"]:
                c["change"] = str(changes[c["name"]]) if c["name"] in changes else None
            own = changes.get(r.patch)
            d["change"] = str(own) if own else None
            d["range_diff"] = [l for rd in s.range_diff
                               if rd.old == r.index or new_index.get(rd.new) == r.patch for l in rd.lines]
            out.append(d)
        return out

    def to_json(self):
        s = self.session
        d = {"status": str(self.outcome), "session": str(self.places.session), "note": self.note}
        if s is None:
            return d
        d.update(phase=str(s.phase), onto=s.onto, repo=s.repo, old_version=s.old_version, tree=str(self.places.tree),
                 patches=self.patches(), lint=list(self.lint))
        if s.stop:
            d["stop"] = s.stop.to_json()
            if self.facts:
                d["stop"]["now"] = {"unmerged": list(self.facts.unmerged), "marked": list(self.facts.marked),
                                    "am": self.facts.am, "commits": [c for c, _ in self.facts.commits]}
        if s.staged:
            d["range_diff_file"] = str(self.places.range_diff)
            d["written"] = {
                "rewritten": [n for n, c in s.staged.changes if c is Change.REWRITTEN],
                "added": [n for n, c in s.staged.changes if c is Change.ADDED],
                "dropped": [{"patch": r.patch, "reason": r.reason} for r in s.results if not r.commits],
                "unchanged": [n for n, c in s.staged.changes if c is Change.UNCHANGED]}
        if s.phase is Phase.DONE:
            d["lock"] = lockmod.load(self.places.lock).as_dict()
        return d


def _check_unchanged(places, s):
    """patches/ and the lock must be what the session started from."""
    for what, now, then in (("patches/", dir_digest(places.patches), s.patches_digest),
                            ("upstream.lock", file_digest(places.lock), s.lock_digest)):
        if now != then:
            raise UsageError(f"{what} of {places.root} changed since the port session started (the session "
                             "recorded it in build/port/session.json): its end would overwrite that change",
                             hint=f"put {what} back as it was (e.g. git checkout -- {what.rstrip('/')}), or "
                                  "--abort and start again")


def _uncommitted(root):
    """patches/ and upstream.lock paths with uncommitted changes, where the
    checkout is a git work tree of its own."""
    top = gitcmd.run(root, "rev-parse", "--show-toplevel", check=False)
    if top.returncode or Path(top.stdout.strip()).resolve() != Path(root).resolve():
        return ()
    st = gitcmd.run(root, "status", "--porcelain", "-z", "--untracked-files=all", "--", "patches",
                    "upstream.lock").stdout
    return tuple(r[3:] for r in st.split("\0") if len(r) > 3)


def start(root, onto, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    """Start a session onto release ``onto`` (a rebase.Onto), and go as far
    as git can."""
    say = progress or (lambda m: None)
    places = Places(Path(root))
    if places.session.exists():
        s = load(places)
        if s.phase is not Phase.DONE:
            raise UsageError(f"a port session onto {s.label} is already in {shown(places.session)} "
                             f"(phase {s.phase})",
                             hint=f"{tool} --continue takes it on, {tool} --status shows it, {tool} --abort "
                                  "removes it")
        _remove_session(places)                 # a finished one: its results are in patches/ already
    if not onto.version:
        raise UsageError(f"port --onto {onto.label}: a port session ends by pinning a release, and "
                         f"{onto.label!r} is not a release version",
                         hint="give a release (e.g. --onto 0.5.17); for a commit, "
                              "tools/stack.py check --against COMMIT --repo URL shows what breaks")
    lock = lockmod.load(places.lock)
    problems = lint(places.root)
    if problems:
        raise UsageError(f"patches/ has {len(problems)} lint finding(s), first: {problems[0]['error']}",
                         hint="fix them (tools/stack.py lint lists them) and commit, then start the port")
    stack = series.load(places.root)
    dirty = _uncommitted(places.root)
    if dirty:
        raise UsageError(f"uncommitted changes in {_files(dirty)}: the port's end rewrites patches/ and "
                         "upstream.lock", hint="commit them (or stash them) first, so that the port's result "
                                               "is one reviewable change")
    repo = onto.repo or lock.repo
    bare = clones.fresh_clone(repo, cache, progress)[0]
    say(f"computing and verifying the lock for v{onto.version} (tag in {repo})")
    new = new_lock(lock, onto, cache, progress, bare)
    build = places.session.parent
    build.mkdir(parents=True, exist_ok=True)
    for leftover in build.glob(".port-removed-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp, mark = locking.fresh_scratch(build, ".port.tmp-", what="an unfinished port session start; safe to delete")
    try:
        tree = tmp / "tree"
        base = prepare_tree(lock, stack, onto, tree, cache, progress, bare)
        _configure_rerere(tree, places)
        lockmod.write(new, tmp / places.new_lock.name, like=places.lock)
        s = Session(onto=onto.version, repo=repo, old_version=lock.version, lock_digest=file_digest(places.lock),
                    patches_digest=dir_digest(places.patches),
                    new_lock_digest=file_digest(tmp / places.new_lock.name), new_base=base["base_commit"],
                    merged=merged_upstream(stack, onto, lock, bare), phase=Phase.APPLYING,
                    head=gitcmd.out(tree, "rev-parse", "HEAD"))
        write_state(tmp / places.state.name, s)
        mark.release()
        (tmp / locking.MARK).unlink(missing_ok=True)
        os.rename(tmp, places.session)
    finally:
        mark.release()
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"session in {shown(places.session)}: {len(stack.patches)} patch(es) onto v{onto.version}")
    return _advance(places, s, stack, say, shown, tool)


def _leaves(a: Attempt):
    if a.status is Status.MERGED_UPSTREAM:
        if a.upstream_commit:
            return f"merged upstream in {a.upstream_commit[:12]} (same patch-id)"
        return "merged upstream (the patch applies in reverse)"
    return "the 3-way merge left nothing to change (upstream already has it)"


def _advance(places, s, stack, say, shown, tool):
    """Apply the remaining patches until one needs the person, then the end."""
    tree = places.tree
    total = len(stack.patches)
    while len(s.results) < total:
        p = stack.patches[len(s.results)]
        a = attempt(tree, p, total, s.merged.get(p.name), keep_conflict=True)
        reused = tuple(REUSED.findall(a.git_am)) if a.stopped else ()
        f = facts(tree, "HEAD") if a.stopped else None
        step = after_attempt(a, f, reused)
        result = None
        if step is Step.REUSE:
            if gitcmd.run(tree, "am", "--continue", check=False).returncode == 0:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.RERERE,
                                     (Carried(p.name, gitcmd.out(tree, "rev-parse", "HEAD"), p.subject),))
                say(f"patch {p.index}/{total} {p.name}: {a.status}, resolution reused (rerere): "
                    f"{_files(reused)}")
            else:
                step = Step.STOP
        if step is Step.STOP:
            stop = Stop(p.index, p.name, p.subject, a.status, s.head, a.stopped, a.conflicted,
                        reused if a.stopped else (), a.failure, a.git_am,
                        gitcmd.out(tree, "rev-parse", f"{OLD}~{total - p.index}"))
            s = save(places, dataclasses.replace(s, phase=Phase.STOPPED, stop=stop))
            say(f"patch {p.index}/{total} {p.name}: {a.status}, stopped for you")
            return Report(Outcome.STOPPED, places, s, facts(tree, s.head) if a.stopped else None)
        if result is None:
            if a.status in LEAVES_SERIES:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT, (), _leaves(a),
                                     a.upstream_commit or "")
                say(f"patch {p.index}/{total} {p.name}: {a.status}, leaves the series ({result.reason})")
            else:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT,
                                     (Carried(p.name, gitcmd.out(tree, "rev-parse", "HEAD"), p.subject),))
                say(f"patch {p.index}/{total} {p.name}: {a.status}")
        s = save(places, dataclasses.replace(s, results=s.results + (result,),
                                             head=gitcmd.out(tree, "rev-parse", "HEAD")))
    return _finish(places, s, stack, say)


def _reconcile(places, s):
    """A run killed while applying: the tree back at the last recorded patch."""
    tree = places.tree
    if am_in_progress(tree):
        gitcmd.run(tree, "am", "--abort", check=False)
    gitcmd.run(tree, "reset", "--quiet", "--hard", s.head)


def continue_(root, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    places = Places(Path(root))
    s = load(places)
    if s.phase is Phase.DONE:
        return Report(Outcome.FINISHED, places, s, note=f"the port onto {s.label} had already finished")
    if s.phase is Phase.FINISHING:
        say("completing the finish of a run that was stopped while finishing")
        return roll_forward(places, s, say)
    _check_unchanged(places, s)
    stack = series.load(places.root)
    if s.phase is Phase.APPLYING:
        say(f"resuming after patch {len(s.results)}/{len(stack.patches)}")
        _reconcile(places, s)
        return _advance(places, s, stack, say, shown, tool)
    stop, tree = s.stop, places.tree
    tree_shown = shown(tree)
    f = facts(tree, stop.head)
    act = continue_step(stop, f, tree_shown)
    if isinstance(act, Refusal):
        raise act.error()
    if f.untracked:
        say(f"note: untracked files in {tree_shown}, part of no patch: {_files(f.untracked)}")
    commits = f.commits
    if act is Act.AM_CONTINUE:
        _record_resolutions(tree)
        p = gitcmd.run(tree, "am", "--continue", check=False)
        if p.returncode:
            raise UsageError(f"{stop.patch}: git am --continue in {tree_shown} failed: "
                             f"{(p.stderr or p.stdout).strip()[:500]}",
                             hint="finish it there yourself (git am --continue, or commit), then --continue")
        commits = facts(tree, stop.head).commits
    named = name_commits(stop.patch, stop.subject, commits, _taken(s, stack))
    if isinstance(named, Refusal):
        raise named.error()
    bad = _commit_problems(tree, named, tree_shown)
    if bad:
        raise bad.error()
    if act is Act.AM_QUIT:
        _record_resolutions(tree)               # the committed resolution, for the next run of this move
        gitcmd.run(tree, "am", "--quit")
    result = PatchResult(stop.patch, stop.index, stop.subject, stop.status, Resolution.PERSON, named)
    extra = [c.name for c in named if c.name != stop.patch]
    say(f"patch {stop.index}/{len(stack.patches)} {stop.patch}: resolved by you"
        + (f"; new patch(es) after it: {', '.join(extra)}" if extra else ""))
    s = save(places, dataclasses.replace(s, phase=Phase.APPLYING, stop=None, results=s.results + (result,),
                                         head=gitcmd.out(tree, "rev-parse", "HEAD")))
    return _advance(places, s, stack, say, shown, tool)


def _taken(s, stack):
    return {p.name for p in stack.patches} | {c.name for r in s.results for c in r.commits}


def skip(root, reason, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    reason = " ".join((reason or "").split())
    if not reason:
        raise UsageError("--skip needs --reason TEXT: why the patch is no longer needed (it is recorded in "
                         "patches/series)", hint='e.g. --skip --reason "upstream does this since #24692"')
    places = Places(Path(root))
    s = load(places)
    if s.phase is not Phase.STOPPED:
        raise UsageError(f"no patch is stopped: the port session onto {s.label} is {s.phase}",
                         hint=f"{tool} --status shows it; --skip drops the patch a stop waits on")
    _check_unchanged(places, s)
    stack = series.load(places.root)
    stop, tree = s.stop, places.tree
    refusal = skip_step(stop, facts(tree, stop.head), shown(tree))
    if refusal:
        raise refusal.error()
    if am_in_progress(tree):
        gitcmd.run(tree, "am", "--abort", check=False)
    gitcmd.run(tree, "reset", "--quiet", "--hard", stop.head)
    result = PatchResult(stop.patch, stop.index, stop.subject, stop.status, Resolution.SKIPPED, (), reason)
    say(f"patch {stop.index}/{len(stack.patches)} {stop.patch}: skipped ({reason})")
    s = save(places, dataclasses.replace(s, phase=Phase.APPLYING, stop=None, results=s.results + (result,),
                                         head=stop.head))
    return _advance(places, s, stack, say, shown, tool)


def _remove_session(places):
    """The session folder goes with one rename (a kill leaves it whole or
    gone), then is deleted."""
    gone = places.session.parent / f".port-removed-{os.getpid()}"
    shutil.rmtree(gone, ignore_errors=True)
    os.rename(places.session, gone)
    shutil.rmtree(gone, ignore_errors=True)


def abort(root, progress=None, shown=str, tool="python tools/stack.py port"):
    places = Places(Path(root))
    try:
        s = load(places)
    except IntegrityError:
        s = None                                   # a damaged state: removing it is all that is left
    if s is not None and s.phase is Phase.FINISHING:
        raise UsageError(f"the port session onto {s.label} is putting the new patches/ and upstream.lock in "
                         "place (phase finishing): aborting now could leave one new and one old",
                         hint=f"{tool} --continue completes it (then git can take the checkout back)")
    if places.tree.is_dir() and am_in_progress(places.tree):
        _record_resolutions(places.tree)           # what was resolved so far is kept for the next run
    _remove_session(places)
    note = (f"the finished session onto {s.label} was removed; patches/ and upstream.lock are the ported ones"
            if s is not None and s.phase is Phase.DONE else
            f"patches/ and upstream.lock are as they were; recorded resolutions stay in {shown(places.rr_cache)}")
    return Report(Outcome.ABORTED, places, None, note=note)


def status(root, progress=None, shown=str, tool="python tools/stack.py port"):
    say = progress or (lambda m: None)
    places = Places(Path(root))
    s = load(places)
    if s.phase is Phase.FINISHING:
        say("completing the finish of a run that was stopped while finishing")
        return roll_forward(places, s, say)
    if s.phase is Phase.DONE:
        return Report(Outcome.FINISHED, places, s)
    if s.phase is Phase.STOPPED:
        return Report(Outcome.STOPPED, places, s, facts(places.tree, s.stop.head))
    return Report(Outcome.IN_PROGRESS, places, s, note=f"a run stopped while applying: {tool} --continue resumes")


# --------------------------------------------------------------------------
# the end

def _finish(places, s, stack, say):
    """Every patch done: stage the new patches/, then put it and the lock in place."""
    s = stage_end(places, s, stack, say)
    s = save(places, dataclasses.replace(s, phase=Phase.FINISHING))
    return roll_forward(places, s, say)


def stage_end(places, s, stack, say):
    """The new patches/ in build/port/stage/patches (the refresh logic: a
    file rewritten only where its change or message changed), checked, and
    the range-diff; returns the session with them (not yet saved)."""
    tree = places.tree
    carried = [c for r in s.results for c in r.commits]
    in_tree = _lines(gitcmd.out(tree, "rev-list", "--reverse", "upstream..HEAD"))
    if list(in_tree) != [c.commit for c in carried]:
        raise IntegrityError(f"{places.tree}: upstream..HEAD holds {len(in_tree)} commit(s), the session recorded "
                             f"{len(carried)}: the tree changed behind the session's back",
                             hint=f"put HEAD back at {s.head[:12]} (git reset --hard), or --abort")
    say(f"re-exporting {len(carried)} patch(es)")
    old = {p.name: p for p in stack.patches}
    texts, changes = {}, []
    for c in carried:
        text, change = compare(tree, c.commit, old.get(c.name))
        changes.append((c.name, change))
        if change is not Change.UNCHANGED:
            texts[c.name] = text
    removed = [r.patch for r in s.results if not r.commits]
    changes += [(n, Change.REMOVED) for n in removed]
    notes = {r.patch: f"dropped on {s.label}: {r.patch}: {r.reason}" for r in s.results if not r.commits}
    if places.stage.exists():
        shutil.rmtree(places.stage)
    places.stage.mkdir()
    stage_patches(places.patches, places.staged_patches, texts, [c.name for c in carried], removed, notes)
    problems = lint_series(series.load(places.stage, strict=False).patches)
    if problems:       # every commit was checked when it was taken (_commit_problems): not expected
        raise IntegrityError(f"the ported series staged in {places.stage} has {len(problems)} lint finding(s), "
                             f"first: {problems[0]['error']}", hint="please report this; --abort leaves "
                                                                     "patches/ and upstream.lock as they are")
    text = range_diff(tree)
    _atomic_write(places.range_diff, text)
    return dataclasses.replace(s, staged=Staged(dir_digest(places.staged_patches), s.new_lock_digest,
                                                tuple(changes)),
                               range_diff=parse_range_diff(text))


def swap_patches(places):
    """patches/ becomes the staged one (one rename exchange; the old one
    lands in the stage)."""
    builder.swap_into_place(places.staged_patches, places.patches, places.stage / "patches.old")


def replace_lock(places):
    os.replace(places.new_lock, places.lock)


def roll_forward(places, s, say):
    """Put the staged end in place, as far as it is not yet (finish_steps)."""
    steps = finish_steps(s, dir_digest(places.patches), file_digest(places.lock),
                         dir_digest(places.staged_patches), file_digest(places.new_lock))
    if isinstance(steps, Refusal):
        raise steps.error()
    for step in steps:
        if step is Put.SWAP_PATCHES:
            say("patches/: the ported series in place")
            swap_patches(places)
        else:
            say(f"upstream.lock: v{s.onto}")
            replace_lock(places)
    s = save(places, dataclasses.replace(s, phase=Phase.DONE))
    return Report(Outcome.FINISHED, places, s, lint=tuple(lint(places.root)))
