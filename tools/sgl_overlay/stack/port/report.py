"""What a port verb returns (``Report``): its outcome, the session, the
tree's facts at a stop, the lint findings after the end; its JSON derived
in one place (``Report.to_json``), its exit code (``Report.exit_code``)."""
import dataclasses

from ... import lock as lockmod
from ..refresh import Change
from .decisions import TreeFacts
from .state import Outcome, Phase, Resolution, Session
from .store import Places

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


