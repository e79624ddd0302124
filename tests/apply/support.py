"""Helpers for tools/apply.py tests: the real pinned release artifact
(fetched once through pip into the user cache), a verified base tree made
from it, and scratch projects whose small patch series are made against
real files of that tree."""
import json
import subprocess
import sys
from pathlib import Path

from sgl_overlay import gitcmd

ROOT = Path(__file__).resolve().parents[2]
APPLY = ROOT / "tools" / "apply.py"
SIZING = "python/sglang/srt/mem_cache/kv_cache_configurator.py"  # the pin's KV-cache sizing module
POOL = "python/sglang/srt/model_executor/pool_configurator.py"
TRAILERS = "Upstream-Status: Pending\nTopic: test\n"


class PatchMaker:
    """Makes git format-patch mails from edits of real files of the base.

    The commits are written with git's plumbing (blobs, a private index, commit-tree) in a
    shared clone without a work tree: checking the whole SGLang tree out for every test cost
    seconds each, and nothing here reads the files from disk."""

    def __init__(self, base, scratch):
        self.dir = scratch
        gitcmd.run(None, "clone", "--quiet", "--shared", "--no-checkout", "--branch", "upstream", str(base),
                   str(scratch))
        self.n = 0

    def _blob(self, data: bytes) -> str:
        return gitcmd.run(self.dir, "hash-object", "-w", "--stdin", input=data, binary=True).stdout.decode().strip()

    def commit(self, edits=(), links=None, message="Change something\n\nWhy.\n", on="upstream",
               author="Ada Example <ada@example.com>", date="2026-06-01T12:00:00+00:00"):
        """A commit on ``on``: ``edits`` [(path, old, new)], old replaced once (None: a new file);
        ``links`` {path: target}, new symlinks.  Returns the commit's id, also the detached HEAD
        (``on="HEAD"`` builds on the last one)."""
        self.n += 1
        index = {"GIT_INDEX_FILE": str(self.dir / ".git" / f"maker-index-{self.n}")}
        gitcmd.run(self.dir, "read-tree", on, env=index)
        for path, old, new in edits:
            if old is None:
                text = new
            else:
                text = gitcmd.run(self.dir, "show", f"{on}:{path}").stdout
                assert old in text, f"{old!r} not in {path}"
                text = text.replace(old, new, 1)
            gitcmd.run(self.dir, "update-index", "--add", "--cacheinfo",
                       f"100644,{self._blob(text.encode())},{path}", env=index)
        for path, target in (links or {}).items():
            gitcmd.run(self.dir, "update-index", "--add", "--cacheinfo",
                       f"120000,{self._blob(target.encode())},{path}", env=index)
        tree = gitcmd.out(self.dir, "write-tree", env=index)
        name, email = author[:-1].split(" <")
        commit = gitcmd.out(self.dir, "commit-tree", tree, "-p", on, input=message,
                            env={"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date})
        gitcmd.run(self.dir, "update-ref", "--no-deref", "HEAD", commit)
        return commit

    def mail(self, commit) -> str:
        return gitcmd.run(self.dir, "format-patch", "-1", "--stdout", commit).stdout

    def make(self, edits, subject="Change something", body="Why it exists; drop when upstream has it.",
             trailers=TRAILERS, on="upstream", author="Ada Example <ada@example.com>",
             date="2026-06-01T12:00:00+00:00", links=None):
        """``edits``: [(path, old, new)], old replaced once (None: new file); ``links``: new symlinks."""
        msg = f"{subject}\n\n{body}\n\n{trailers}" if trailers else f"{subject}\n\n{body}\n"
        commit = self.commit(edits, links, msg, on, author, date)
        return self.mail(commit), commit


class Project:
    """A scratch project root: upstream.lock, patches/, overlay/."""

    def __init__(self, root, lock_text):
        self.root = root
        (root / "patches").mkdir(parents=True)
        (root / "overlay").mkdir()
        (root / "upstream.lock").write_text(lock_text)
        self.series([])
        self.out = root / "build" / "sglang"

    def series(self, entries, files=None):
        for name, text in (files or {}).items():
            (self.root / "patches" / name).write_text(text)
        (self.root / "patches" / "series").write_text("# test series\n" + "".join(e + "\n" for e in entries))

    def overlay(self, rel, text, replaces=None):
        p = self.root / "overlay" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if replaces:
            m = self.root / "overlay" / "overlay.toml"
            old = m.read_text() if m.exists() else "[replaces]\n"
            m.write_text(old + f'"{rel}" = "{replaces}"\n')

    def apply(self, *args, check_json=True):
        cmd = [sys.executable, str(APPLY), "--root", str(self.root), "--out", str(self.out), *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        p.data = json.loads(p.stdout) if "--json" in args and check_json else None
        return p

    def git(self, *args):
        return gitcmd.out(self.out, *args)
