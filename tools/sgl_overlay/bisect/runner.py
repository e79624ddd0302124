"""Running the bisection: decide() -> run points -> log, until a verdict."""
import concurrent.futures

from ..errors import OverlayError
from .log import Result
from .strategy import Phase, decide, remaining_steps
from .terms import Raw, Term, agree
from .testrun import Children, TestRun
from .tree_cache import StepSkip


class Bisection:
    """Drive decide() -> run points -> log, until a verdict."""

    def __init__(self, rng, test, trees, log, known, fixed=False, runs=1, jobs=1, progress=None, batch=0):
        self.rng, self.test, self.trees, self.log = rng, test, trees, log
        self.batch = batch                   # rounds of decide() so far (a resume goes on counting)
        self.known = known
        self.fixed, self.runs, self.jobs = fixed, runs, jobs
        self.say = progress or (lambda m: None)
        self.children = Children()
        self.step = sum(1 for pid in known if pid not in self._endpoint_ids())
        self.executions = 0

    def _endpoint_ids(self):
        return {p.id for p in self.rng.extra_old} | {self.rng.points[0].id, self.rng.points[-1].id}

    def _one(self, pid, label):
        """[(TestRun, patches dropped or None)], one per run at the point."""
        point = self.rng.point(pid)
        try:
            tree, dropped, key = self.trees.get(point)
        except StepSkip as e:
            return [(TestRun(125, Raw.SKIP, "", 0.0, f"the stack does not apply: {e}"), None)]
        try:
            if dropped:
                self.say(f"{label}: dropped (already upstream here, applies in reverse): {', '.join(dropped)}")
            out = []
            for _ in range(self.runs):
                r = self.test.run(tree, self.children)
                out.append((r, dropped))
                if r.raw is Raw.ABORT:
                    break
            return out
        finally:
            if key:
                self.trees.trees.release(key)

    def run(self):
        """The ``Verdict``, once decide() has one."""
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        try:
            while True:
                d = decide(self.rng, self.known, self.jobs)
                if d.verdict is not None:
                    return d.verdict
                labels = {}
                self.batch += 1
                total = self.step + remaining_steps(self.rng, self.known, self.jobs)
                for pid in d.test:
                    if d.phase is Phase.ENDPOINTS:
                        which = "old" if pid != self.rng.points[-1].id else "new"
                        labels[pid] = f"endpoint ({which}) {self.rng.point(pid).short()}"
                    else:
                        self.step += 1
                        labels[pid] = f"step {self.step} of ~{total}: {self.rng.point(pid).short()}"
                futures = {pool.submit(self._one, pid, labels[pid]): pid for pid in d.test}
                for f in concurrent.futures.as_completed(futures):
                    pid = futures[f]
                    done = [Result(point=pid, phase=d.phase, batch=self.batch, run=n, raw=r.raw,
                                   term=Term.of(r.raw, self.fixed), code=r.code, seconds=round(r.seconds, 2),
                                   summary=r.summary, output=r.output, dropped=dropped)
                            for n, (r, dropped) in enumerate(f.result(), 1)]
                    for r in done:
                        self.executions += 1
                        self.log.append(r)
                        self.known.setdefault(pid, []).append(r.term)
                        if r.raw is Raw.ABORT:
                            raise OverlayError(
                                f"the test aborted at {self.rng.point(pid).short()} (exit {r.code}): "
                                f"{(r.summary or r.output.strip())[-300:]}",
                                hint="exit codes >= 128 stop a bisection (git bisect run's rule); fix the test, "
                                     f"then continue with --resume {self.log.path}")
                    p = self.rng.point(pid)
                    why = done[-1].summary
                    self.say(f"{labels[pid]} ({p.label[:60]}): {'/'.join(r.raw for r in done)} -> "
                             f"{agree([r.term for r in done]) or 'flaky'}, {sum(r.seconds for r in done):.1f}s"
                             + (f" [{why[:100]}]" if why else ""))
        except BaseException:
            self.children.stop_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
