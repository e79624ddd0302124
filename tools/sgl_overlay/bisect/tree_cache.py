"""Trees: pristine or with the stack, cached per point and stack digest."""
import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

from .. import builder, gitcmd, locking
from ..errors import ApplyError, OverlayError


class StepSkip(Exception):
    """The point cannot be tested (the stack does not apply); never 'bad'."""


class TreeCache:
    """Directories keyed by (point, stack digest) under ``root``, each
    ``tree/`` plus ``entry.json``; least recently used ones are evicted past
    ``max_bytes``.  An entry whose tree no longer matches its record is
    rebuilt, not trusted.

    Between processes: an entry in use is held with a shared lock
    (``.KEY.lock``) from lookup to release; eviction and repair take it
    exclusively without waiting, so they never remove a tree that another
    bisect is using (they skip it)."""

    def __init__(self, root, max_bytes):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.in_use = set()
        self.lock = threading.Lock()
        self.held = {}                          # key -> [locking.Held, count] (shared)
        self.marks = {}                         # scratch dir -> locking.Held

    def _lock_path(self, key):
        return self.root / f".{key}.lock"

    def _share(self, key):
        with self.lock:
            if key in self.held:
                self.held[key][1] += 1
                return
        self.root.mkdir(parents=True, exist_ok=True)
        h = locking.hold(self._lock_path(key), f"the cached tree {self.root / key}", wait=None, shared=True)
        with self.lock:
            if key in self.held:                # another thread of this process took it meanwhile
                self.held[key][1] += 1
                h.release()
            else:
                self.held[key] = [h, 1]

    @staticmethod
    def key(point_id, stack_digest):
        return hashlib.sha256(f"{point_id}\0{stack_digest or 'pristine'}".encode()).hexdigest()[:24]

    def lookup(self, key, say):
        entry = self.root / key
        meta_path = entry / "entry.json"
        with self.lock:
            self.in_use.add(key)
        self._share(key)
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            head = gitcmd.run(entry / "tree", "rev-parse", "HEAD", check=False).stdout.strip()
            dirty = gitcmd.run(entry / "tree", "status", "--porcelain", "--untracked-files=no", check=False)
            ok = head == meta["head"] and dirty.returncode == 0 and not dirty.stdout.strip()
        except (OSError, ValueError, KeyError):
            ok, meta = False, None
        if not ok:
            say(f"cached tree {entry} does not match its record (modified or damaged): rebuilding it")
            h = self.held[key][0]
            try:
                fcntl_ok = locking.try_lock(h.fd, False)      # upgrade: only if no other process uses it
            except OSError:
                fcntl_ok = False
            if not fcntl_ok:
                raise OverlayError(f"cached tree {entry} does not match its record, and another process is "
                                   "using it, so it cannot be rebuilt now",
                                   hint="let the other bisect finish, then run again (or give this one another "
                                        "--tree-cache)")
            shutil.rmtree(entry, ignore_errors=True)
            locking.try_lock(h.fd, True)                       # back to shared
            return None
        os.utime(meta_path)
        return meta

    def store(self, key, tmp_entry, meta):
        entry = self.root / key
        (tmp_entry / locking.MARK).unlink(missing_ok=True)
        meta["bytes"] = _du(tmp_entry)
        (tmp_entry / "entry.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        try:
            os.rename(tmp_entry, entry)
        except OSError:                      # another bisect stored it meanwhile
            shutil.rmtree(tmp_entry, ignore_errors=True)
        self.evict()
        return entry / "tree"

    def release(self, key):
        with self.lock:
            self.in_use.discard(key)
            h = self.held.get(key)
            if h is not None:
                h[1] -= 1
                if h[1] <= 0:
                    del self.held[key]
                    h[0].release()

    def evict(self):
        with self.lock:
            busy = set(self.in_use)
        entries = []
        for e in self.root.iterdir() if self.root.exists() else []:
            m = e / "entry.json"
            if e.name.startswith(".") or not m.exists():
                continue
            try:
                entries.append((m.stat().st_mtime, json.loads(m.read_text()).get("bytes", 0), e))
            except (OSError, ValueError):
                entries.append((0, 0, e))
        total = sum(b for _, b, _ in entries)
        for _, size, e in sorted(entries):
            if total <= self.max_bytes:
                break
            if e.name in busy:
                continue
            fd = None
            try:
                fd = os.open(self._lock_path(e.name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                if not locking.try_lock(fd, False):
                    continue                    # another process is using this tree
                shutil.rmtree(e, ignore_errors=True)
                total -= size
            except OSError:
                continue
            finally:
                if fd is not None:
                    os.close(fd)

    def scratch(self):
        """A scratch directory, locked while this process lives; those
        that dead processes left are removed (never a live one's)."""
        self.root.mkdir(parents=True, exist_ok=True)
        d, mark = locking.fresh_scratch(self.root, ".build-")
        with self.lock:
            self.marks[d] = mark
        return d

    def done(self, scratch):
        shutil.rmtree(scratch, ignore_errors=True)
        with self.lock:
            mark = self.marks.pop(scratch, None)
        if mark is not None:
            mark.release()


def _du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
            except OSError:
                pass
    return total


class Trees:
    """Point -> tree directory: the range's pristine tree where it has one
    (a release's unpacked artifact), else a checkout made by the range
    (``Range.checkout``) and kept in the tree cache.  ``stack`` given: the
    patch stack applied on top with git am; a patch that applies in reverse
    (already upstream there) is dropped for that step, any other failure
    makes the step a skip."""

    def __init__(self, rng, lock, stack=None, cache=None, tree_cache=None, progress=None):
        self.rng = rng
        self.lock = lock
        self.stack = stack
        self.cache = cache
        self.trees = tree_cache
        self.say = progress or (lambda m: None)

    def get(self, point):
        """(tree path, the patches dropped there or None without a stack step,
        the cache key or None) or raise StepSkip; the caller releases the key."""
        if self.stack is None:
            tree = self.rng.pristine(point, self.cache, self.say)
            if tree is not None:
                return tree, None, None
        key = TreeCache.key(point.id, self.stack.digest if self.stack else None)
        meta = self.trees.lookup(key, self.say)
        if meta is not None:
            if meta.get("skip"):
                self.trees.release(key)
                raise StepSkip(meta["skip"])
            return self.trees.root / key / "tree", tuple(meta.get("dropped", [])), key
        tmp = self.trees.scratch()
        try:
            repo = tmp / "tree"
            self.rng.checkout(point, repo, self.lock, self.cache, self.say)
            dropped, skip = self._apply_stack(repo) if self.stack else ([], None)
            head = gitcmd.out(repo, "rev-parse", "HEAD")
            if skip:                           # remembered, so a resume does not re-apply
                shutil.rmtree(repo)
                repo.mkdir()
                gitcmd.init(repo)
                gitcmd.run(repo, "commit", "--quiet", "--allow-empty", "-m", "skip")
                head = gitcmd.out(repo, "rev-parse", "HEAD")
            path = self.trees.store(key, tmp, {"point": point.id, "stack": self.stack.digest if self.stack else None,
                                               "head": head, "dropped": dropped, "skip": skip})
        except BaseException:
            self.trees.release(key)
            raise
        finally:
            self.trees.done(tmp)
        if skip:
            self.trees.release(key)
            raise StepSkip(skip)
        return path, tuple(dropped), key

    def _apply_stack(self, repo):
        """(dropped patch names, None) or ([...], why the step is skipped)."""
        gitcmd.run(repo, "checkout", "--quiet", "-b", "patched")
        total = len(self.stack.patches)
        dropped, kept = [], []
        for p in self.stack.patches:
            failure = builder.apply_patch(repo, p, total)
            if failure is None:
                kept.append(p)
            elif failure.get("applies_in_reverse"):
                dropped.append(p.name)
            else:
                return dropped, builder.format_failure(failure)
        try:
            builder.apply_overlay(repo, self.lock, self.stack)
        except ApplyError as e:
            return dropped, f"the overlay does not apply: {e.message}"
        return dropped, None
