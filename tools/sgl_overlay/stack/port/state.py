"""The port session's state and its JSON (``build/port/session.json``):
frozen dataclasses and enums, read and written whole (``Session.to_json``,
``Session.from_json``)."""
import dataclasses
import enum

from .. import ports
from ..classify import Status
from ..refresh import Change

SCHEMA = 1


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


