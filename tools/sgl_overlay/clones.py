"""Cached bare clones of a git repository (``--repo URL_OR_PATH``, bisect's
commit ranges, ``stack.py --onto``): one per URL or resolved local path under
``<cache>/git/``, made in a scratch folder and renamed into place, cloned
and fetched by one process at a time."""
import hashlib
import os
import shutil
from pathlib import Path

from . import gitcmd, locking
from .errors import UsageError
from .project import cache_dir


def bare_clone(url, cache, progress):
    """``(bare, key)``: the cached bare clone of ``url`` (made now if there is
    none) and what it was cloned from (a local path resolved)."""
    say = progress or (lambda msg: None)
    local = Path(url).expanduser()
    key = str(local.resolve()) if local.exists() else url
    bare = cache_dir(cache) / "git" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".git")
    if bare.exists():
        return bare, key
    bare.parent.mkdir(parents=True, exist_ok=True)
    with clone_lock(bare, say):
        if bare.exists():                    # another process cloned it meanwhile
            return bare, key
        say(f"cloning {url} (bare, cached at {bare})")
        tmp, mark = locking.fresh_scratch(bare.parent, ".clone-")
        try:
            gitcmd.run(None, "clone", "--bare", "--quiet", key, str(tmp / "r.git"))
            os.replace(tmp / "r.git", bare)
        except gitcmd.GitFailed as e:
            raise UsageError(f"could not clone {url}: {e.stderr.strip()}",
                             hint="check the URL or path given with --repo")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            mark.release()
    return bare, key


def fresh_clone(url, cache, progress):
    """The cached bare clone of ``url`` with its branches and tags fetched
    now (forced: a tag or branch that moved there moves here too, and a
    path that now holds another repository is followed).  If the fetch
    fails, the cached clone is used, saying so."""
    bare, key = bare_clone(url, cache, progress)
    with clone_lock(bare, progress):
        p = gitcmd.run(bare, "fetch", "--quiet", "--tags", "--force", key, "+refs/heads/*:refs/heads/*",
                       check=False)
    if p.returncode != 0 and progress:
        progress(f"could not refresh {url} ({p.stderr.strip().splitlines()[-1:]}); using the cached clone")
    return bare, key


def clone_lock(bare, progress=None):
    """One process at a time clones or fetches into the cached bare clone."""
    bare = Path(bare)
    return locking.cache_entry(bare.parent / f".{bare.name}.lock", f"the cached clone {bare}", progress)
