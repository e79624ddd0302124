"""The step-tree cache: a damaged entry is rebuilt, not trusted; the size
bound evicts least recently used entries."""
import json

from tests.bisect.scripts import version_test
from tests.bisect.support import bisect


def run(tmp_path, repo, trees, name, *extra):
    cmd = version_test(tmp_path / f"{name}.py", tmp_path / f"{name}.calls", first_bad="0.5.13")
    return bisect("--repo", str(repo), "--good", "v0.5.12", "--bad", "v0.5.13.post1", "--log",
                  str(tmp_path / f"{name}.jsonl"), "--tree-cache", str(trees), "--json", *extra, "--", *cmd)


def test_a_modified_cached_tree_is_rebuilt(tmp_path, repo):
    trees = tmp_path / "trees"
    rc, data, err = run(tmp_path, repo, trees, "first")
    assert rc == 0, err
    entry = next(e for e in trees.iterdir() if json.loads((e / "entry.json").read_text())["point"] == data["first_new"]["id"])
    target = entry / "tree" / "python" / "sglang" / "version.py"
    target.write_text("__version__ = 'tampered'\n")
    rc, data2, err = run(tmp_path, repo, trees, "second")
    assert rc == 0, err
    assert f"cached tree {entry} does not match its record (modified or damaged): rebuilding it" in err
    assert "tampered" not in target.read_text()
    assert data2["first_new"] == data["first_new"]


def test_the_size_bound_evicts_old_entries(tmp_path, repo):
    trees = tmp_path / "trees"
    rc, data, err = run(tmp_path, repo, trees, "small", "--tree-cache-mb", "1")
    assert rc == 0, err
    assert data["first_new"]["label"] == "sglang 0.5.13"
    kept = [e for e in trees.iterdir() if not e.name.startswith(".")]
    assert len(kept) == 1                          # only the entry in use when the last one was stored
