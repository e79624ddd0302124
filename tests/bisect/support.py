"""Helpers for the bisect tests: running tools/bisect.py, the history
repository of real releases, and a small real patch stack made against
the pinned release's files."""
import json
import os
import math
import shutil
import subprocess
from pathlib import Path

from sgl_overlay import gitcmd
from tests.by_path import load
from tests.terminal import AT_A_TERMINAL

ROOT = Path(__file__).resolve().parents[2]
# the history repository of real releases: tools/bench's, loaded by its path (a benchmark's module, no package)
_history = load(ROOT / "tools" / "bench" / "release_history.py", "release_history")
commit_release, release_history = _history.commit_release, _history.release_history
BISECT = ROOT / "tools" / "bisect.py"

# consecutive published releases, 0.5.9 .. 0.5.16 (python -m pip index versions sglang)
HISTORY = ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1",
           "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16"]

TRAILERS = "Upstream-Status: {status}\nTopic: test\n"


def bound(n):
    """The issue's ceiling on test executions with --runs 1."""
    return math.ceil(math.log2(n)) + 2


# bisect is started as from a terminal (SIGINT at its default): tests/terminal.py says why.


def bisect_argv(*args):
    """The command line of tools/bisect.py ARGS, started as from a terminal."""
    return [*AT_A_TERMINAL, str(BISECT), *args]


def bisect(*args, timeout=600, **kw):
    """Run tools/bisect.py --json; returns (exit code, parsed stdout or None, stderr)."""
    p = subprocess.run(bisect_argv(*args), capture_output=True, text=True, timeout=timeout, **kw)
    try:
        data = json.loads(p.stdout) if "--json" in args else None
    except ValueError:
        data = None
    return p.returncode, data, p.stderr


def results(log):
    return [json.loads(l) for l in Path(log).read_text().splitlines() if '"type": "result"' in l]


def without_drafter_weights(name, directory):
    """A copy of the shipped scenario ``name`` without ``[draft] weights_gib``, written to
    ``directory``: its figures are the target's reading alone, which releases from v0.5.14
    (sgl-project/sglang#23862, the drafter starts before the sizing) overstate, and say so."""
    from sgl_overlay.harness import load_scenario
    text = load_scenario(name).path.read_text()
    start = text.index("\n[draft]")
    line = text.index("\nweights_gib = ", start)
    assert line < text.index("\n[server]"), f"{name}: no weights_gib in its [draft] table"
    Path(directory).mkdir(parents=True, exist_ok=True)
    out = Path(directory) / f"{name}.toml"
    out.write_text(text[:line] + text[text.index("\n", line + 1):])
    return out


def history():
    return release_history(HISTORY)


def _cached_history(cache, name, build):
    """A bare repo of real release trees, built once into the cache by
    ``build(repo)`` (which returns the commit for main) and shared by the
    xdist workers: built aside, marked READY, then renamed into place."""
    from sgl_overlay import project
    root = project.cache_dir(cache) / "release-history"
    target = root / name
    if (target / "READY").exists():
        return target / "repo"
    tmp = root / f".{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    repo = tmp / "repo"
    gitcmd.init(repo, bare=True)
    head = build(repo)
    gitcmd.run(repo, "update-ref", "refs/heads/main", head)
    gitcmd.run(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (tmp / "READY").write_text("ok\n")
    try:
        tmp.rename(target)
    except OSError:                      # another worker made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target / "repo"


def branchy_history(cache=None):
    """Main: 0.5.11, 0.5.12, 0.5.13, 0.5.14; a release branch from 0.5.12
    holding 0.5.12.post1 (tag v0.5.12.post1 is not an ancestor of main)."""
    def build(repo):
        c11 = commit_release(repo, "0.5.11", None, 0)
        c12 = commit_release(repo, "0.5.12", c11, 1)
        commit_release(repo, "0.5.12.post1", c12, 2)
        c13 = commit_release(repo, "0.5.13", c12, 3)
        return commit_release(repo, "0.5.14", c13, 4)
    return _cached_history(cache, "branchy-0.5.11-0.5.14", build)


# A real upstream fix, backported: upstream's own hunk from v0.5.13
# (two_batch_overlap.py, TboDPAttentionPreparer short-circuit when TBO is
# off).  It applies to 0.5.9-0.5.12.post1 and is already upstream (applies
# in reverse) from 0.5.13 on.
BACKPORT = ("python/sglang/srt/batch_overlap/two_batch_overlap.py",
            "        self.enable_two_batch_overlap = enable_two_batch_overlap\n\n",
            "        self.enable_two_batch_overlap = enable_two_batch_overlap\n\n"
            "        # Short-circuit when TBO is off: prepare_mlp_sync_batch_raw invokes\n"
            "        # this preparer unconditionally for the forward_mode all-gather, but\n"
            "        # compute_split_seq_index is TBO-only and undefined for some modes\n"
            "        # (e.g. MIXED from enable_mixed_chunk).\n"
            "        if not enable_two_batch_overlap:\n"
            "            self.local_tbo_split_seq_index = None\n"
            "            return False, self._compute_local_forward_mode(local_batch)\n\n")

# Our own note in the KV pool's set_kv_buffer signature.  Its context is in
# every release 0.5.9-0.5.16 except 0.5.14, where upstream changed that
# signature (loc -> loc_info) and 0.5.15 changed it back: the stack does not
# apply at 0.5.14.
NOTE = ("python/sglang/srt/mem_cache/memory_pool.py",
        "        self,\n        layer: RadixAttention,\n        loc: torch.Tensor,\n"
        "        cache_k: torch.Tensor,\n        cache_v: torch.Tensor,\n        k_scale: Optional[float] = None,\n",
        "        self,\n        layer: RadixAttention,\n        loc: torch.Tensor,\n"
        "        # sgl-overlay: loc indexes the token slots of this pool\n"
        "        cache_k: torch.Tensor,\n        cache_v: torch.Tensor,\n        k_scale: Optional[float] = None,\n")


def make_patch(scratch, edit, subject, status):
    path, old, new = edit
    gitcmd.run(scratch, "checkout", "--quiet", "--force", "--detach", "v0.5.12.post1")
    f = scratch / path
    text = f.read_text()
    assert old in text, f"{old!r} not in {path} at v0.5.12.post1"
    f.write_text(text.replace(old, new, 1))
    gitcmd.run(scratch, "commit", "--quiet", "-am",
               f"{subject}\n\nA test patch for tools/bisect.py; drop it with the test.\n\n"
               + TRAILERS.format(status=status),
               env={"GIT_AUTHOR_DATE": "2026-06-01T12:00:00+00:00"})
    return gitcmd.run(scratch, "format-patch", "-1", "--stdout", "HEAD").stdout


def make_stack_root(dest, repo):
    """A project root (upstream.lock, patches/, overlay/) whose series is
    [the backport, the note], made against v0.5.12.post1 of ``repo``."""
    dest = Path(dest)
    (dest / "patches").mkdir(parents=True)
    (dest / "overlay").mkdir()
    shutil.copy(ROOT / "upstream.lock", dest / "upstream.lock")
    scratch = dest / ".scratch"
    gitcmd.run(None, "clone", "--quiet", "--shared", str(repo), str(scratch))
    (dest / "patches" / "tbo-skip-preparer-when-off.patch").write_text(
        make_patch(scratch, BACKPORT, "Skip the TBO DP preparer when TBO is off", "Backport [v0.5.13]"))
    (dest / "patches" / "kv-pool-loc-note.patch").write_text(
        make_patch(scratch, NOTE, "Note what loc indexes in set_kv_buffer", "Pending"))
    (dest / "patches" / "series").write_text("tbo-skip-preparer-when-off.patch\nkv-pool-loc-note.patch\n")
    shutil.rmtree(scratch)
    return dest


def merge_history(cache=None):
    """Main: 0.5.11, 0.5.12, then a merge of a side branch (0.5.12 ->
    0.5.12.post1) whose tree is 0.5.13, then 0.5.14: real trees, a real
    merge shape for --all-parents."""
    def build(repo):
        c11 = commit_release(repo, "0.5.11", None, 0)
        c12 = commit_release(repo, "0.5.12", c11, 1)
        side = commit_release(repo, "0.5.12.post1", c12, 2)
        c13 = commit_release(repo, "0.5.13", c12, 3)
        tree13 = gitcmd.out(repo, "rev-parse", f"{c13}^{{tree}}")
        merge = gitcmd.out(repo, "commit-tree", tree13, "-p", c12, "-p", side, "-m",
                           "Merge the 0.5.12 release branch",
                           env={"GIT_AUTHOR_DATE": "2026-01-01T00:00:04+00:00",
                                "GIT_COMMITTER_DATE": "2026-01-01T00:00:04+00:00"})
        gitcmd.run(repo, "tag", "-f", "v0.5.13", merge)
        return commit_release(repo, "0.5.14", merge, 5)
    return _cached_history(cache, "merge-0.5.11-0.5.14", build)
