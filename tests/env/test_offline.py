"""Without a package index, a filled cache is enough: the release list
saved by the last successful listing is used, and says so."""
import json
import os
import subprocess
import sys

import pytest



def list_in_child(cache, offline):
    env = dict(os.environ, SGL_OVERLAY_CACHE=str(cache))
    if offline:  # no configuration, no index: pip cannot list anything
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1")
    code = ("import json, sys; from sgl_overlay import release_list; "
            "print(json.dumps(release_list.list_releases(progress=lambda m: print(m, file=sys.stderr))))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.network
def test_listing_asks_the_index_and_saves_the_list(tmp_path):
    p = list_in_child(tmp_path, offline=False)
    assert p.returncode == 0, p.stderr
    versions = json.loads(p.stdout)
    assert {"0.5.9", "0.5.12.post1", "0.5.16"} <= set(versions)
    saved = json.loads((tmp_path / "releases.json").read_text())["versions"]
    # the release candidates are listed and kept (a port may name one), the default list is the finals
    assert "0.5.10rc0" in saved and "0.5.10rc0" not in versions
    assert [v for v in saved if "rc" not in v] == versions


def test_offline_listing_uses_the_saved_list_and_says_so(tmp_path):
    saved = {"listed": "2026-12-01 12:00 UTC", "versions": ["0.5.11", "0.5.12", "0.5.12.post1"]}
    (tmp_path / "releases.json").write_text(json.dumps(saved))
    p = list_in_child(tmp_path, offline=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == saved["versions"]
    assert "using the list saved on 2026-12-01 12:00 UTC" in p.stderr


def test_offline_listing_without_a_saved_list_is_a_usage_error(tmp_path):
    p = list_in_child(tmp_path, offline=True)
    assert p.returncode == 1 and "could not list the sglang releases" in p.stderr
    assert "UsageError" in p.stderr  # raised to the caller, not swallowed
