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
    """Makes git format-patch mails from edits of real files of the base."""

    def __init__(self, base, scratch):
        self.dir = scratch
        gitcmd.run(None, "clone", "--quiet", "--shared", "--branch", "upstream", str(base), str(scratch))
        self.n = 0

    def make(self, edits, subject="Change something", body="Why it exists; drop when upstream has it.",
             trailers=TRAILERS, on="upstream", author="Ada Example <ada@example.com>",
             date="2026-06-01T12:00:00+00:00"):
        """``edits``: [(path, old, new)], old replaced once (None: new file)."""
        gitcmd.run(self.dir, "checkout", "--quiet", "--force", "--detach", on)
        for path, old, new in edits:
            p = self.dir / path
            if old is None:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(new)
            else:
                text = p.read_text()
                assert old in text, f"{old!r} not in {path}"
                p.write_text(text.replace(old, new, 1))
        gitcmd.run(self.dir, "add", "-A")
        name, email = author[:-1].split(" <")
        msg = f"{subject}\n\n{body}\n\n{trailers}" if trailers else f"{subject}\n\n{body}\n"
        gitcmd.run(self.dir, "commit", "--quiet", "-m", msg,
                   env={"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date})
        commit = gitcmd.out(self.dir, "rev-parse", "HEAD")
        text = gitcmd.run(self.dir, "format-patch", "-1", "--stdout", commit).stdout
        return text, commit


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
