"""Any published release, unpacked (the regression harness, bisect, plan
``--release``, the tests): ``<cache>/releases/VERSION/`` holding ``sglang/``
from the release's artifact (artifacts.release: a wheel, else the sdist),
verified against the artifact store's record on every use, unpacked once
into a scratch folder and renamed into place whole."""
import os
import shutil

from . import archive, artifacts, locking, versions
from .errors import UsageError
from .project import cache_dir

MARKER = ".sgl-overlay-release"      # written last, naming the artifact: the tree is whole


def release_tree(version, cache=None, progress=None):
    """A directory holding ``sglang/`` from the release ``version``'s
    artifact (wheel or sdist), cached; its artifact verified on every use
    against the sha256 recorded at its first download."""
    say = progress or (lambda msg: None)
    if versions.release(version) is None:
        raise UsageError(f"release {version!r} is not a version number", hint="e.g. 0.5.12.post1")
    root = cache_dir(cache) / "releases"
    target = root / version
    artifact = artifacts.release(version, cache, progress)
    if _unpacked(target, artifact.name):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with locking.cache_entry(root / f".{version}.lock", f"the unpacking of sglang {version}", say):
        if _unpacked(target, artifact.name):      # another process unpacked it meanwhile
            return target
        say(f"unpacking {artifact.name}")
        tmp, mark = locking.fresh_scratch(root, f".{version}-")
        try:
            new = tmp / "tree"
            archive.extract_package(artifact.path, artifacts.PACKAGE, new / artifacts.PACKAGE)
            (new / MARKER).write_text(artifact.name + "\n")
            if target.exists():
                os.rename(target, tmp / "old")
            os.rename(new, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            mark.release()
    return target


def _unpacked(target, name):
    try:
        return (target / MARKER).read_text().strip() == name
    except OSError:
        return False
