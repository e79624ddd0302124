"""The git source: a cached bare clone, the commit fetched, its
python/sglang tree id checked exactly against the lock."""
import re

from tests.apply.support import SIZING
from sgl_overlay import gitcmd


def local_upstream(base_tree, tmp_path):
    """A local git repository whose commit holds the real pinned python/
    tree (what a clone of SGLang at the tag holds under python/sglang)."""
    repo = tmp_path / "upstream-repo"
    gitcmd.run(None, "clone", "--quiet", "--branch", "upstream", str(base_tree), str(repo))
    return repo, gitcmd.out(repo, "rev-parse", "HEAD"), gitcmd.out(repo, "rev-parse", "HEAD:python/sglang")


def pin(project, commit, tree):
    lock = project.root / "upstream.lock"
    text = re.sub(r'(?m)^commit = ".*"', f'commit = "{commit}"', lock.read_text())
    lock.write_text(re.sub(r'(?m)^tree = ".*"', f'tree = "{tree}"', text))


def test_git_source_builds_and_checks_the_exact_tree(project, patches, base_tree, tmp_path):
    repo, commit, tree = local_upstream(base_tree, tmp_path)
    pin(project, commit, tree)
    text, _ = patches.make([(SIZING, "import logging\n", "import logging  # git\n")])
    project.series(["g.patch"], {"g.patch": text})
    cache = tmp_path / "cache"
    r = project.apply("--repo", str(repo), "--cache", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    m = r.data["manifest"]
    assert m["source"] == {"source": "git", "repo": str(repo)}
    assert m["base_commit"] == commit and m["tree"] == tree
    assert project.git("rev-parse", "upstream") == commit     # the upstream commit itself
    assert project.git("rev-list", "--count", "upstream..patched") == "1"
    assert list((cache / "git").glob("*.git"))                 # the cached bare clone
    assert project.apply("--repo", str(repo), "--cache", str(cache)).stdout.strip().endswith(
        f"stack {m['stack_digest'][:12]})")                     # warm: up to date
    # a new upstream commit is fetched into the cache as needed
    (repo / "NEWS").write_text("x\n")
    gitcmd.run(repo, "add", "NEWS")
    gitcmd.run(repo, "commit", "-qm", "news")
    newer = gitcmd.out(repo, "rev-parse", "HEAD")
    pin(project, newer, tree)
    r = project.apply("--repo", str(repo), "--cache", str(cache), "--json")
    assert r.returncode == 0, r.stderr
    assert r.data["manifest"]["base_commit"] == newer


def test_git_source_with_a_different_tree_is_an_integrity_failure(project, base_tree, tmp_path):
    repo, commit, tree = local_upstream(base_tree, tmp_path)
    (repo / SIZING).write_text("changed\n")
    gitcmd.run(repo, "commit", "-qam", "drift")
    drifted = gitcmd.out(repo, "rev-parse", "HEAD")
    pin(project, drifted, tree)
    r = project.apply("--repo", str(repo), "--cache", str(tmp_path / "cache"))
    assert r.returncode == 3
    assert f"python/sglang has tree {gitcmd.out(repo, 'rev-parse', 'HEAD:python/sglang')}" in r.stderr
    assert not project.out.exists()


def test_git_source_without_the_commit(project, base_tree, tmp_path):
    repo, commit, tree = local_upstream(base_tree, tmp_path)
    pin(project, "1" * 40, tree)
    r = project.apply("--repo", str(repo), "--cache", str(tmp_path / "cache"))
    assert r.returncode == 3 and "does not have commit 1111111111" in r.stderr


def test_a_moved_tag_is_followed_in_the_cached_clone(tmp_path):
    """A path's cached bare clone follows the repository there now: a tag
    moved (or a new repository at the same path) must not resolve to what
    the cache saw first.  (Pytest reuses its numbered folders once they are
    removed, so a test's upstream repository can reappear at a cached path
    with other commits: this made the stack's lock test flaky.)"""
    from sgl_overlay import clones

    repo, cache = tmp_path / "upstream", tmp_path / "cache"
    gitcmd.run(None, "init", "-q", str(repo))
    commits = []
    for n in ("first", "second"):
        (repo / "f").write_text(n + "\n")
        gitcmd.run(repo, "add", "f")
        gitcmd.run(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", n)
        gitcmd.run(repo, "tag", "-f", "v1")
        commits.append(gitcmd.out(repo, "rev-parse", "HEAD"))
        bare, _ = clones.bare_clone(str(repo), cache, None)
        cached = gitcmd.out(bare, "rev-parse", "v1^{commit}")
        fresh, _ = clones.fresh_clone(str(repo), cache, None)
        assert fresh == bare and gitcmd.out(fresh, "rev-parse", "v1^{commit}") == commits[-1]
    assert cached == commits[0]        # the plain cached clone was stale: the check above could fail
