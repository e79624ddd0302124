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
from . import ports, ranges
from .classify import LEAVES_SERIES, RESOLVED, Status
from .export import apply_required
from .lint import lint, lint_series
from .rebase import OLD, OLD_BASE, REUSED, Attempt, attempt, merged_upstream, new_lock, prepare_tree, unmerged
from .refresh import Change, change_of, compare, stage_patches
from .texts import add_trailers, format_patch, slug

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
    def staged_port(self):
        """A topic port's new series folder, staged."""
        return self.stage / "port"

    @property
    def patches(self):
        return self.root / "patches"

    @property
    def lock(self):
        return self.root / "upstream.lock"

    def port(self, s):
        """A topic port's series folder, ``patches/ports/<label>/<topic>``."""
        return self.root / ports.PORTS / s.label / s.topic


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
    # a topic port (port --topic T): the pinned topic's patches onto the upstream, written as
    # patches/ports/<ports_label>/<topic>/; the pin (patches/, upstream.lock) is never written
    topic: str = ""            # "": the whole stack, ending by moving the pin
    ports_label: str = ""      # the port folder's label (v0.5.23, or a commit)
    base: str = "upstream"     # what the carried commits start on (a topic port: the required port series)
    requires: tuple = ()       # (topic, patch count) of the port series applied first
    ports_digest: str | None = None   # digest of the topic's port folder at the start (None: none yet)

    @property
    def label(self):
        return self.ports_label or f"v{self.onto}"

    @property
    def target(self):
        """What the end writes, as the person reads it."""
        return f"{ports.PORTS.as_posix()}/{self.label}/{self.topic}/" if self.topic else "patches/"

    @property
    def target_digest(self):
        """The digest of what the end writes, at the start."""
        return self.ports_digest if self.topic else self.patches_digest

    def to_json(self):
        return {"schema": SCHEMA, "onto": self.onto, "repo": self.repo, "old_version": self.old_version,
                "topic": self.topic, "ports_label": self.ports_label, "base": self.base,
                "requires": [list(r) for r in self.requires], "ports_digest": self.ports_digest,
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
                   tuple(RangeDiff.from_json(r) for r in d["range_diff"]),
                   d.get("topic", ""), d.get("ports_label", ""), d.get("base", "upstream"),
                   tuple((t, n) for t, n in d.get("requires", ())), d.get("ports_digest"))


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
    """What remains of the end, from the digests alone: patches/ (a topic
    port: its port folder) and upstream.lock now, and the staged new ones
    (None: absent).  Each must be the session's old content or its new one
    (a topic port's lock: its old one); anything else is a Refusal
    (integrity)."""
    st = session.staged
    steps = []
    if patches_now != st.patches_digest:
        if patches_now not in (session.target_digest, None) or staged_patches != st.patches_digest:
            stage = "build/port/stage/" + ("port" if session.topic else "patches")
            return Refusal(f"{session.target} is neither what the port session started from nor what it "
                           f"staged (digest {(patches_now or 'none')[:12]}): it changed during the finish",
                           f"compare it with {stage} (the new one, or after the swap the old "
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


def atomic_write(path, text):
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
    atomic_write(Path(path), json.dumps(session.to_json(), indent=2, sort_keys=True) + "\n")


def load(places):
    """The session in ``places``; UsageError (exit 2) when there is none."""
    if not places.session.exists():
        raise UsageError(f"no port session in {places.session}",
                         hint="start one: python tools/stack.py port --onto VERSION [--repo URL_OR_PATH], or "
                              "for one topic: python tools/stack.py port --topic T --onto VERSION")
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


def _commit_problems(tree, carried, label, s):
    """Every commit's mail must be a patch the series accepts (python/
    paths, test/ too for a topic port's, the headers, a body,
    Upstream-Status and Topic)."""
    with tempfile.TemporaryDirectory(prefix="sgl-overlay-port-") as t:
        for c in carried:
            f = Path(t) / c.name
            f.write_text(format_patch(tree, c.commit))
            where = f"commit {c.commit[:12]} ({c.subject!r}, to be {s.target}{c.name})"
            try:
                p = series.parse_patch(f, 1, where=where, roots=series.PORT_ROOTS if s.topic else
                                       (series.PATCH_ROOT,))
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


def range_diff(tree, base="upstream"):
    """``git range-diff`` of the old series against the new one, the
    commits since ``base`` (text; empty where there are none: git takes no
    empty range)."""
    if not gitcmd.out(tree, "rev-list", "--max-count=1", f"{base}..HEAD"):
        return ""
    return gitcmd.run(tree, "range-diff", "--no-color", f"{OLD_BASE}..{OLD}", f"{base}..HEAD").stdout


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
                 patches=self.patches(), lint=list(self.lint), topic=s.topic or None, label=s.label)
        if s.topic:
            d.update(port=s.target.rstrip("/"), requires=[{"topic": t, "patches": n} for t, n in s.requires])
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
                "unchanged": [n for n, c in s.staged.changes if c is Change.UNCHANGED],
                "removed": [n for n, c in s.staged.changes if c is Change.REMOVED]}
        if s.phase is Phase.DONE and not s.topic:
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


def _uncommitted(root, paths=("patches", "upstream.lock")):
    """``paths`` (default patches/ and upstream.lock) with uncommitted
    changes, where the checkout is a git work tree of its own."""
    top = gitcmd.run(root, "rev-parse", "--show-toplevel", check=False)
    if top.returncode or Path(top.stdout.strip()).resolve() != Path(root).resolve():
        return ()
    st = gitcmd.run(root, "status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).stdout
    return tuple(r[3:] for r in st.split("\0") if len(r) > 3)


def _clear(places, shown, tool):
    """No session may be running there (a finished one is removed: its
    results are in place already)."""
    refuse_running(places.root, shown, tool)
    if places.session.exists():
        _remove_session(places)


def refuse_running(root, shown=str, tool="python tools/stack.py port"):
    """Refuse (exit 2) when an unfinished session is in ``root``'s build/port;
    nothing is removed here."""
    places = Places(Path(root))
    if places.session.exists():
        s = load(places)
        if s.phase is not Phase.DONE:
            what = f"a topic port of {s.topic} onto {s.label}" if s.topic else f"a port session onto {s.label}"
            raise UsageError(f"{what} is already in {shown(places.session)} (phase {s.phase})",
                             hint=f"{tool} --continue takes it on, {tool} --status shows it, {tool} --abort "
                                  "removes it")


def _linted_stack(places):
    problems = lint(places.root)
    if problems:
        raise UsageError(f"patches/ has {len(problems)} lint finding(s), first: {problems[0]['error']}",
                         hint="fix them (tools/stack.py lint lists them) and commit, then start the port")
    return series.load(places.root)


def _refuse_uncommitted(places, paths, writes):
    dirty = _uncommitted(places.root, paths)
    if dirty:
        raise UsageError(f"uncommitted changes in {_files(dirty)}: the port's end rewrites {writes}",
                         hint="commit them (or stash them) first, so that the port's result "
                              "is one reviewable change")


def _open(places, lock, stack, onto, cache, progress, bare, make):
    """The session folder, made whole beside build/port and renamed into
    place: the tree ``prepare_tree`` gives (rerere on), then
    ``make(scratch, tree, base)`` returns the Session (writing any file of
    its own into the scratch folder)."""
    build = places.session.parent
    build.mkdir(parents=True, exist_ok=True)
    for leftover in build.glob(".port-removed-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp, mark = locking.fresh_scratch(build, ".port.tmp-", what="an unfinished port session start; safe to delete")
    try:
        tree = tmp / "tree"
        base = prepare_tree(lock, stack, onto, tree, cache, progress, bare)
        _configure_rerere(tree, places)
        s = make(tmp, tree, base)
        write_state(tmp / places.state.name, s)
        mark.release()
        (tmp / locking.MARK).unlink(missing_ok=True)
        os.rename(tmp, places.session)
    finally:
        mark.release()
        shutil.rmtree(tmp, ignore_errors=True)
    return s


def start(root, onto, cache=None, progress=None, shown=str, tool="python tools/stack.py port"):
    """Start a session onto release ``onto`` (a rebase.Onto), and go as far
    as git can."""
    say = progress or (lambda m: None)
    places = Places(Path(root))
    _clear(places, shown, tool)
    if not onto.version:
        raise UsageError(f"port --onto {onto.label}: a port session ends by pinning a release, and "
                         f"{onto.label!r} is not a release version",
                         hint="give a release (e.g. --onto 0.5.17); for a commit, "
                              "tools/stack.py check --against COMMIT --repo URL shows what breaks, and "
                              "port --topic T --onto COMMIT --repo URL ports one topic onto it")
    lock = lockmod.load(places.lock)
    stack = _linted_stack(places)
    _refuse_uncommitted(places, ("patches", "upstream.lock"), "patches/ and upstream.lock")
    repo = onto.repo or lock.repo
    bare = clones.fresh_clone(repo, cache, progress)[0]
    say(f"computing and verifying the lock for v{onto.version} (tag in {repo})")
    new = new_lock(lock, onto, cache, progress, bare)

    def make(tmp, tree, base):
        lockmod.write(new, tmp / places.new_lock.name, like=places.lock)
        return Session(onto=onto.version, repo=repo, old_version=lock.version, lock_digest=file_digest(places.lock),
                       patches_digest=dir_digest(places.patches),
                       new_lock_digest=file_digest(tmp / places.new_lock.name), new_base=base["base_commit"],
                       merged=merged_upstream(stack, onto, lock, bare), phase=Phase.APPLYING,
                       head=gitcmd.out(tree, "rev-parse", "HEAD"))

    s = _open(places, lock, stack, onto, cache, progress, bare, make)
    say(f"session in {shown(places.session)}: {len(stack.patches)} patch(es) onto v{onto.version}")
    return _advance(places, s, stack, say, shown, tool)


def _refuse_replacing(places, label, topic, replace, tool):
    """A topic port onto a label that already has that topic's port series
    replaces it: refused (exit 2, before any work) without ``replace``."""
    have = places.root / ports.PORTS / label / topic
    if (have / "series").is_file() and not replace:
        n = len(series.read_series(have))
        raise UsageError(f"port --topic {topic}: {(ports.PORTS / label / topic).as_posix()}/ already holds a port "
                         f"series ({n} patch(es)); this session would replace it",
                         hint=f"verify that one: tools/stack.py export --topic {topic} --onto {label.lstrip('v')} "
                              f"--check; to replace it: {tool} --topic {topic} --onto ... --replace")


def start_topic(root, topic, onto, cache=None, progress=None, shown=str, tool="python tools/stack.py port",
                replace=False):
    """Start a topic port: the pinned topic's patches onto ``onto`` (a
    release, through its verified artifact, or a commit of ``onto.repo``),
    on the port series they require, ending in
    ``patches/ports/<label>/<topic>/``; the pin is never written."""
    say = progress or (lambda m: None)
    places = Places(Path(root))
    _clear(places, shown, tool)
    lock = lockmod.load(places.lock)
    stack = _linted_stack(places)
    mine = [p for p in stack.patches if p.topic == topic]
    if not mine:
        topics = ", ".join(dict.fromkeys(p.topic for p in stack.patches)) or "none"
        raise UsageError(f"port --topic {topic}: no patch of {places.patches / 'series'} has Topic: {topic}",
                         hint=f"give a topic of the pinned stack: {topics}")
    bare = clones.fresh_clone(onto.repo, cache, progress)[0] if onto.repo else None
    label = ports.label_of(onto) if onto.version else None
    if label:
        _refuse_replacing(places, label, topic, replace, tool)
        _refuse_uncommitted(places, ((ports.PORTS / label / topic).as_posix(),), "that port folder")
        need = _required(places.root / ports.PORTS / label, topic, mine)

    def make(tmp, tree, base):
        nonlocal label, need
        if label is None:           # a commit: an existing folder named by a prefix of it, else its 12 digits
            full = base["base_commit"]
            have = ports.label_dirs(places.root, dataclasses.replace(onto, commit=full))
            label = have[0].name if have else full[:12]
            _refuse_replacing(places, label, topic, replace, tool)
            _refuse_uncommitted(places, ((ports.PORTS / label / topic).as_posix(),), "that port folder")
            need = _required(places.root / ports.PORTS / label, topic, mine)
        rel = (ports.PORTS / label / topic).as_posix()
        required = apply_required(places.root / ports.PORTS / label, need, topic, rel, tree, say)
        head = gitcmd.out(tree, "rev-parse", "HEAD")
        return Session(onto=onto.version or onto.commit, repo=onto.repo or "", old_version=lock.version,
                       lock_digest=file_digest(places.lock), patches_digest=dir_digest(places.patches),
                       new_lock_digest="", new_base=base["base_commit"],
                       merged=merged_upstream(stack, onto, lock, bare), phase=Phase.APPLYING, head=head,
                       topic=topic, ports_label=label, base=head, requires=tuple(required),
                       ports_digest=dir_digest(places.root / rel))

    s = _open(places, lock, stack, onto, cache, progress, bare, make)
    on = "".join(f" on the {t} port ({n})" for t, n in s.requires)
    say(f"session in {shown(places.session)}: topic {topic}, {len(mine)} patch(es) onto {s.label}{on}, "
        f"to {s.target}")
    return _advance(places, s, stack, say, shown, tool)


def _required(label_dir, topic, mine):
    """The topics whose port series the topic port applies on: the
    ``Requires:`` of its port series there (if any), then of its pinned
    patches; each must have a series in ``label_dir`` (else exit 2)."""
    have = label_dir / topic
    names = ports.requires(ports.load(have)) if (have / "series").is_file() else []
    names += ports.requires(ports.PortSeries(have, label_dir.name, topic, mine))
    names = list(dict.fromkeys(names))
    for t in names:
        if t == topic or not (label_dir / t / "series").is_file():
            raise UsageError(f"port --topic {topic}: it requires the {t} port ('Requires: {t}'), and "
                             f"{label_dir / t} holds no series",
                             hint=f"port {t} first (tools/stack.py port --topic {t} --onto ...), or correct "
                                  "the Requires: trailer")
    return names


def _leaves(a: Attempt):
    if a.status is Status.MERGED_UPSTREAM:
        if a.upstream_commit:
            return f"merged upstream in {a.upstream_commit[:12]} (same patch-id)"
        return "merged upstream (the patch applies in reverse)"
    return "the 3-way merge left nothing to change (upstream already has it)"


def work_of(s, stack):
    """The patches the session carries, in order: the whole series, or a
    topic port's topic (each keeps its index in the series, which names its
    commit in the old stack, ``OLD~(n - index)``)."""
    return [p for p in stack.patches if not s.topic or p.topic == s.topic]


def _at(s, stack, index):
    """'k/n': the place of the series' patch ``index`` among what the session carries."""
    todo = work_of(s, stack)
    return f"{next((k for k, p in enumerate(todo, 1) if p.index == index), index)}/{len(todo)}"


def _advance(places, s, stack, say, shown, tool):
    """Apply the remaining patches until one needs the person, then the end."""
    tree = places.tree
    total = len(stack.patches)
    todo = work_of(s, stack)
    while len(s.results) < len(todo):
        p = todo[len(s.results)]
        at = f"{len(s.results) + 1}/{len(todo)}"
        a = attempt(tree, p, total, s.merged.get(p.name), keep_conflict=True)
        reused = tuple(REUSED.findall(a.git_am)) if a.stopped else ()
        f = facts(tree, "HEAD") if a.stopped else None
        step = after_attempt(a, f, reused)
        result = None
        if step is Step.REUSE:
            if gitcmd.run(tree, "am", "--continue", check=False).returncode == 0:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.RERERE,
                                     (Carried(p.name, gitcmd.out(tree, "rev-parse", "HEAD"), p.subject),))
                say(f"patch {at} {p.name}: {a.status}, resolution reused (rerere): "
                    f"{_files(reused)}")
            else:
                step = Step.STOP
        if step is Step.STOP:
            stop = Stop(p.index, p.name, p.subject, a.status, s.head, a.stopped, a.conflicted,
                        reused if a.stopped else (), a.failure, a.git_am,
                        gitcmd.out(tree, "rev-parse", f"{OLD}~{total - p.index}"))
            s = save(places, dataclasses.replace(s, phase=Phase.STOPPED, stop=stop))
            say(f"patch {at} {p.name}: {a.status}, stopped for you")
            return Report(Outcome.STOPPED, places, s, facts(tree, s.head) if a.stopped else None)
        if result is None:
            if a.status in LEAVES_SERIES:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT, (), _leaves(a),
                                     a.upstream_commit or "")
                say(f"patch {at} {p.name}: {a.status}, leaves the series ({result.reason})")
            else:
                result = PatchResult(p.name, p.index, p.subject, a.status, Resolution.GIT,
                                     (Carried(p.name, gitcmd.out(tree, "rev-parse", "HEAD"), p.subject),))
                say(f"patch {at} {p.name}: {a.status}")
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
        say(f"resuming after patch {len(s.results)}/{len(work_of(s, stack))}")
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
    bad = _commit_problems(tree, named, tree_shown, s)
    if bad:
        raise bad.error()
    if act is Act.AM_QUIT:
        _record_resolutions(tree)               # the committed resolution, for the next run of this move
        gitcmd.run(tree, "am", "--quit")
    result = PatchResult(stop.patch, stop.index, stop.subject, stop.status, Resolution.PERSON, named)
    extra = [c.name for c in named if c.name != stop.patch]
    say(f"patch {_at(s, stack, stop.index)} {stop.patch}: resolved by you"
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
                         "patches/series, or as '# not ported: X.patch -- TEXT' in a topic port's series)",
                         hint='e.g. --skip --reason "upstream does this since #24692"')
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
    say(f"patch {_at(s, stack, stop.index)} {stop.patch}: skipped ({reason})")
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
        raise UsageError(f"the port session onto {s.label} is putting the new "
                         f"{s.target if s.topic else 'patches/ and upstream.lock'} in place (phase finishing): "
                         "aborting now could leave " + ("it half new" if s.topic else "one new and one old"),
                         hint=f"{tool} --continue completes it (then git can take the checkout back)")
    if places.tree.is_dir() and am_in_progress(places.tree):
        _record_resolutions(places.tree)           # what was resolved so far is kept for the next run
    _remove_session(places)
    if s is not None and s.phase is Phase.DONE:
        note = f"the finished session onto {s.label} was removed; " + \
            (f"{s.target} is the ported series" if s.topic else "patches/ and upstream.lock are the ported ones")
    else:
        note = (f"{s.target}, " if s is not None and s.topic else "") + "patches/ and upstream.lock are as " \
            f"they were; recorded resolutions stay in {shown(places.rr_cache)}"
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
    """Every patch done: stage the new patches/ (a topic port: its port
    folder), then put it (and the lock) in place."""
    s = (stage_port if s.topic else stage_end)(places, s, stack, say)
    s = save(places, dataclasses.replace(s, phase=Phase.FINISHING))
    return roll_forward(places, s, say)


def _carried(places, s):
    """The commits the session carries; they must be the tree's commits
    since the session's base."""
    carried = [c for r in s.results for c in r.commits]
    in_tree = _lines(gitcmd.out(places.tree, "rev-list", "--reverse", f"{s.base}..HEAD"))
    if list(in_tree) != [c.commit for c in carried]:
        raise IntegrityError(f"{places.tree}: {s.base[:12]}..HEAD holds {len(in_tree)} commit(s), the session "
                             f"recorded {len(carried)}: the tree changed behind the session's back",
                             hint=f"put HEAD back at {s.head[:12]} (git reset --hard), or --abort")
    return carried


def _fresh_stage(places):
    if places.stage.exists():
        shutil.rmtree(places.stage)
    places.stage.mkdir()


def _with_range_diff(places, s, staged, changes, keep=None):
    """The session with what it staged and its range-diff (written to
    build/port/range-diff.txt; ``keep``: the old patches' indices whose
    pairs are kept, pairs with a new commit always are)."""
    text = range_diff(places.tree, s.base)
    atomic_write(places.range_diff, text)
    pairs = tuple(rd for rd in parse_range_diff(text) if keep is None or rd.new is not None or rd.old in keep)
    return dataclasses.replace(s, staged=Staged(dir_digest(staged), s.new_lock_digest or s.lock_digest,
                                                tuple(changes)), range_diff=pairs)


def stage_end(places, s, stack, say):
    """The new patches/ in build/port/stage/patches (the refresh logic: a
    file rewritten only where its change or message changed), checked, and
    the range-diff; returns the session with them (not yet saved)."""
    tree = places.tree
    carried = _carried(places, s)
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
    _fresh_stage(places)
    stage_patches(places.patches, places.staged_patches, texts, [c.name for c in carried], removed, notes)
    problems = lint_series(series.load(places.stage, strict=False).patches)
    if problems:       # every commit was checked when it was taken (_commit_problems): not expected
        raise IntegrityError(f"the ported series staged in {places.stage} has {len(problems)} lint finding(s), "
                             f"first: {problems[0]['error']}", hint="please report this; --abort leaves "
                                                                     "patches/ and upstream.lock as they are")
    return _with_range_diff(places, s, places.staged_patches, changes)


def port_mails(s, stack, carried_by, old):
    """[(file name, trailers to add)] of a topic port's carried commits
    (``carried_by``: (pinned patch, Carried) in order), with ``old`` its
    existing port series (None: none): each names the pinned patch it
    carries (``Ports:``); the ``Evidence:`` and ``Requires:`` of the old
    port patch that carries the same pinned patch, else the pinned patch's
    own; the port series the session applied first in ``Requires:`` where no
    patch says it.  The pinned patch's own commit takes that old port
    patch's file name (one old port patch a pinned patch, a name free)."""
    pinned = {p.name: p for p in stack.patches}
    by = {}
    for q in (old.patches if old else ()):
        for n in ports.ports_of(q):
            by.setdefault(n, []).append(q)
    own_names = {c.name for _, c in carried_by}
    out, used = [], set()
    for name, c in carried_by:
        olds = by.get(name, [])
        q = next((q for q in olds if q.name == name), olds[0] if len(olds) == 1 else None)
        file = c.name
        if q and c.name == name and q.name not in used and (q.name == c.name or q.name not in own_names):
            file = q.name
        used.add(file)
        src = q or pinned[name]
        add = [("Ports", name), ("Requires", src.trailers.get("Requires", "")),
               ("Evidence", " ".join(ports.evidence_of(src)))]
        out.append((file, add))
    if s.requires and out and not any(v for _, add in out for k, v in add if k == "Requires"):
        out[0] = (out[0][0], [(k, v or (", ".join(t for t, _ in s.requires) if k == "Requires" else v))
                              for k, v in out[0][1]])
    return out


def _series_header(s):
    lines = [f"# Topic {s.topic} ported to SGLang {s.label} (tools/stack.py port --topic {s.topic}).",
             "# One git format-patch mail a line, applied in this order with git am."]
    lines += [f"# It applies on {ports.PORTS.as_posix()}/{s.label}/{t}/ (Requires: {t})." for t, _ in s.requires]
    return "\n".join(lines) + "\n"


def stage_port(places, s, stack, say):
    """A topic port's end, staged in build/port/stage/port: the series
    (the old one's comments kept; a '# not ported: X.patch -- why' for each
    pinned patch skipped or left behind) and the mails (``port_mails``; a
    file rewritten only where its change or message changed); and the
    range-diff of the pinned patches against the port patches."""
    tree = places.tree
    carried = _carried(places, s)
    say(f"writing {len(carried)} port patch(es) for {s.target}")
    d = places.port(s)
    old = ports.load(d) if (d / "series").is_file() else None
    mine = work_of(s, stack)
    by = [(r.patch, c) for r in s.results for c in r.commits]
    olds = {q.name: q for q in (old.patches if old else ())}
    texts, changes, names = {}, [], []
    for (file, add), (_, c) in zip(port_mails(s, stack, by, old), by):
        text = add_trailers(format_patch(tree, c.commit), add)
        change = change_of(text, olds.get(file))
        names.append(file)
        changes.append((file, change))
        if change is not Change.UNCHANGED:
            texts[file] = text
    removed = [n for n in olds if n not in names]
    changes += [(n, Change.REMOVED) for n in removed]
    _fresh_stage(places)
    if old is None:
        skeleton = places.stage / "skeleton"
        skeleton.mkdir()
        (skeleton / "series").write_text(_series_header(s))
    dest = stage_patches(old.dir if old else skeleton, places.staged_port, texts, names, removed)
    if old is None:
        shutil.rmtree(skeleton)
    series_file = dest / "series"
    text = ports.with_not_ported(series_file.read_text(), [(r.patch, r.reason) for r in s.results if not r.commits])
    if s.label.startswith("v"):          # a release: a new line says the range it was made for (docs/stack.md)
        text = ranges.with_ranges(text, f">={s.label[1:]}", new=old is None)
    series_file.write_text(text)
    return _with_range_diff(places, s, dest, changes, keep={p.index for p in mine})


def swap_patches(places, s=None):
    """patches/ (a topic port: its port folder) becomes the staged one (one
    rename exchange, or one rename where there was none; the old one lands
    in the stage)."""
    if s is not None and s.topic:
        dest = places.port(s)
        dest.parent.mkdir(parents=True, exist_ok=True)
        builder.swap_into_place(places.staged_port, dest, places.stage / "port.old")
        return
    builder.swap_into_place(places.staged_patches, places.patches, places.stage / "patches.old")


def replace_lock(places):
    os.replace(places.new_lock, places.lock)


def roll_forward(places, s, say):
    """Put the staged end in place, as far as it is not yet (finish_steps)."""
    if s.topic:
        steps = finish_steps(s, dir_digest(places.port(s)), file_digest(places.lock),
                             dir_digest(places.staged_port), s.lock_digest)
    else:
        steps = finish_steps(s, dir_digest(places.patches), file_digest(places.lock),
                             dir_digest(places.staged_patches), file_digest(places.new_lock))
    if isinstance(steps, Refusal):
        raise steps.error()
    for step in steps:
        if step is Put.SWAP_PATCHES:
            say(f"{s.target}: the ported series in place")
            swap_patches(places, s)
        else:
            say(f"upstream.lock: v{s.onto}")
            replace_lock(places)
    s = save(places, dataclasses.replace(s, phase=Phase.DONE))
    return Report(Outcome.FINISHED, places, s, lint=tuple(lint(places.root)))
