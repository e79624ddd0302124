"""The port session's decisions: pure functions of the state and of what
git reported (``TreeFacts``): what to do after a patch's attempt, how
``--continue`` and ``--skip`` take a stop, what the new commits are named,
what remains of the end, and the next steps shown to the person."""
import dataclasses
import enum

from ...errors import IntegrityError, UsageError
from .. import ports
from ..classify import RESOLVED, Status
from ..rebase import Attempt
from ..texts import slug
from .state import Carried, Session, Stop

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


def some_files(paths, limit=8):
    paths = list(paths)
    return ", ".join(paths[:limit]) + (f" (and {len(paths) - limit} more)" if len(paths) > limit else "")


def continue_step(stop: Stop, f: TreeFacts, tree_shown="build/port/tree"):
    """How ``--continue`` takes the person's resolution of ``stop``, or why it cannot."""
    g = f"git -C {tree_shown}"
    if f.unmerged:
        return Refusal(f"{stop.patch}: unmerged paths remain in {tree_shown}: {some_files(f.unmerged)}",
                       f"resolve them, then {g} add FILE... (and {g} am --continue, or commit), then --continue")
    if f.marked:
        return Refusal(f"{stop.patch}: conflict markers (<<<<<<< ======= >>>>>>>) remain in {tree_shown}: "
                       f"{some_files(f.marked)}", f"edit them out, {g} add FILE..., then --continue")
    if not f.descends:
        return Refusal(f"{stop.patch}: HEAD of {tree_shown} no longer descends from {stop.head[:12]}, where the "
                       "session stopped", f"put it back ({g} reset --hard {stop.head[:12]}), or --abort")
    if f.merges:
        return Refusal(f"{stop.patch}: merge commit {f.merges[0][:12]} since the stop: a series is linear",
                       f"make plain commits ({g} reset --soft {stop.head[:12]} and commit again)")
    if f.commits:
        if f.staged or f.unstaged:
            return Refusal(f"{stop.patch}: uncommitted changes in {tree_shown} besides the commits made since the "
                           f"stop: {some_files(f.staged + f.unstaged)}",
                           f"commit them ({g} commit -a) or discard them ({g} checkout -- FILE), then --continue")
        return Act.AM_QUIT if f.am else Act.TAKE
    if f.am and f.staged:
        if f.unstaged:
            return Refusal(f"{stop.patch}: changes not staged in {tree_shown}: {some_files(f.unstaged)}",
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


def leaves_reason(a: Attempt):
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


def place_of(s, stack, index):
    """'k/n': the place of the series' patch ``index`` among what the session carries."""
    todo = work_of(s, stack)
    return f"{next((k for k, p in enumerate(todo, 1) if p.index == index), index)}/{len(todo)}"


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
