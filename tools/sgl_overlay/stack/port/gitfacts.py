"""What git reports of the port session's tree (``TreeFacts``: a stop's
state now; conflict markers; git am's stopped state), the recorded
resolutions (git rerere, kept in build/port-rr-cache), the range-diff of the
old series against the new, and uncommitted changes of the checkout."""
import os
import re
import shutil
from pathlib import Path

from ... import gitcmd
from ..rebase import OLD, OLD_BASE, unmerged
from .decisions import TreeFacts
from .state import RangeDiff

MARKER = re.compile(r"^(?:<{7}|>{7})(?: |$)|^={7}$")


def lines_of(text):
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
        commits = tuple(tuple(l.split("\0", 1)) for l in lines_of(log))
        merges = lines_of(gitcmd.out(tree, "rev-list", "--merges", f"{since}..HEAD"))
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


def configure_rerere(tree, places):
    """rerere on, its recorded resolutions kept outside the session (a
    relative link, so that the checkout may move)."""
    gitcmd.rerere_on(tree)
    places.rr_cache.mkdir(parents=True, exist_ok=True)
    git_dir = Path(tree) / ".git"
    link = git_dir / "rr-cache"
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    # the start's scratch folder sits where build/port will: the same relative target
    os.symlink(os.path.relpath(places.rr_cache, places.tree / ".git"), link)


def record_resolutions(tree):
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
    return gitcmd.range_diff(tree, f"{OLD_BASE}..{OLD}", f"{base}..HEAD")


def uncommitted(root, paths=("patches", "upstream.lock")):
    """``paths`` (default patches/ and upstream.lock) with uncommitted
    changes, where the checkout is a git work tree of its own."""
    top = gitcmd.run(root, "rev-parse", "--show-toplevel", check=False)
    if top.returncode or Path(top.stdout.strip()).resolve() != Path(root).resolve():
        return ()
    st = gitcmd.run(root, "status", "--porcelain", "-z", "--untracked-files=all", "--", *paths).stdout
    return tuple(r[3:] for r in st.split("\0") if len(r) > 3)
