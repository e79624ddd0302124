"""The artifact store's one trust policy (sgl_overlay/artifacts.py,
docs/lock.md): a file is used only when its sha256 equals the lock's digest
when the lock names it, else the store's record made when the file entered
the store; a mismatch is exit 3, the file and its record discarded.

Each test works in a private cache holding hard links to the test cache's
real release wheels (so a discarded file is the link, never the shared
copy), with pip served from the test cache only (no index)."""
import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from sgl_overlay import artifacts, errors
from sgl_overlay.project import CACHE_ENV

RELEASE = "0.5.9"                        # a small pure wheel the test cache holds


def _digest(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _shared(version=RELEASE):
    """The test cache's own copy of a release (through the store, fetched once)."""
    return artifacts.release(version).path


def _shared_wheel(lock, name):
    """The test cache's own copy of one of the lock's wheels (fetched once, checked)."""
    return artifacts.lock_wheel(lock, name).path


def _private(tmp_path, *shared):
    """A cache whose artifacts/ holds hard links to the shared files ``shared``
    (paths that the test cache's store gave) and no records."""
    store = tmp_path / "cache" / "artifacts"
    store.mkdir(parents=True)
    for path in shared:
        os.link(path, store / path.name)
    return tmp_path / "cache"


def _offline(monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(Path(os.environ[CACHE_ENV]) / "artifacts"))


@pytest.fixture
def no_index(monkeypatch):
    """pip sees no index, only the test cache's files (find-links)."""
    _offline(monkeypatch)


@pytest.fixture
def pin_offline(lock, monkeypatch):
    """As ``no_index``, with the pin's own wheel in the test cache first (fetched
    with the index, once), so that pip finds it there."""
    _shared_wheel(lock, lock.artifact_filename)
    _offline(monkeypatch)


def test_a_file_put_by_hand_is_recorded_at_first_use_and_checked_against_it_after(tmp_path):
    name = _shared().name
    cache = _private(tmp_path, _shared())
    record = cache / "artifacts" / (name + ".sha256")
    got = artifacts.release(RELEASE, cache)
    assert got.path == cache / "artifacts" / name and got.trust is artifacts.Trust.RECORDED
    assert got.sha256 == _digest(got.path)
    assert record.read_text().split() == [_digest(got.path), name]       # recorded now
    record.write_text("0" * 64 + f"  {name}\n")                           # the record and the file disagree
    with pytest.raises(errors.IntegrityError) as e:
        artifacts.release(RELEASE, cache)
    assert e.value.code == 3 and name in str(e.value) and "0" * 64 in str(e.value)
    assert not got.path.exists() and not record.exists()                  # both discarded
    assert _digest(_shared()) == _digest(artifacts.location(name))        # the shared copy untouched


def test_an_unreadable_record_is_an_integrity_error(tmp_path):
    name = _shared().name
    cache = _private(tmp_path, _shared())
    (cache / "artifacts" / (name + ".sha256")).write_text("")
    with pytest.raises(errors.IntegrityError, match="unreadable"):
        artifacts.release(RELEASE, cache)
    assert not (cache / "artifacts" / name).exists()


def test_the_lock_digest_is_the_check_when_the_lock_names_the_file(lock, tmp_path):
    cache = _private(tmp_path, _shared_wheel(lock, lock.artifact_filename))
    stale = cache / "artifacts" / (lock.artifact_filename + ".sha256")
    stale.write_text("1" * 64 + f"  {lock.artifact_filename}\n")          # a record the lock overrules
    got = artifacts.pinned(lock, cache)
    assert got.trust is artifacts.Trust.PINNED and got.sha256 == lock.artifact_sha256 == _digest(got.path)
    wrong = dataclasses.replace(lock, artifact_sha256="2" * 64)
    with pytest.raises(errors.IntegrityError) as e:
        artifacts.pinned(wrong, cache)
    assert e.value.code == 3 and "pinned in the lock" in str(e.value)
    assert not got.path.exists()


def test_a_wheel_the_lock_does_not_list_is_checked_against_the_record(lock, tmp_path):
    other = next(iter(lock.wheels))
    cache = _private(tmp_path, _shared_wheel(lock, other))
    unlisted = dataclasses.replace(lock, wheels={})
    got = artifacts.lock_wheel(unlisted, other, cache)
    assert got.trust is artifacts.Trust.RECORDED and got.sha256 == _digest(got.path) == lock.wheels[other]
    listed = artifacts.lock_wheel(lock, other, cache)
    assert listed.trust is artifacts.Trust.PINNED and listed.path == got.path


def test_a_download_enters_the_store_with_its_record(tmp_path, no_index):
    cache = tmp_path / "cache"
    got = artifacts.release(RELEASE, cache)
    assert got.path.parent == cache / "artifacts" and got.name == _shared().name
    assert got.sha256 == _digest(got.path) == _digest(_shared())
    assert (cache / "artifacts" / (got.name + ".sha256")).read_text().split() == [got.sha256, got.name]
    assert not [p for p in (cache / "artifacts").iterdir() if p.name.startswith(".download-")]
    assert artifacts.release(RELEASE, cache) == got                       # then found, not downloaded again


def test_a_download_that_differs_from_the_lock_never_enters_the_store(lock, tmp_path, pin_offline):
    cache = tmp_path / "cache"
    wrong = dataclasses.replace(lock, artifact_sha256="3" * 64)
    with pytest.raises(errors.IntegrityError) as e:
        artifacts.pinned(wrong, cache)
    assert e.value.code == 3 and "downloaded artifact" in str(e.value)
    assert [p.name for p in (cache / "artifacts").iterdir() if not p.name.startswith(".")] == []


def test_what_pip_cannot_find_is_named_with_the_next_step(lock, tmp_path, no_index):
    cache = tmp_path / "cache"
    with pytest.raises(errors.UsageError) as e:
        artifacts.release("0.0.1", cache)
    assert e.value.code == 2 and "sglang 0.0.1" in str(e.value) and "pip index versions" in e.value.hint
    missing = artifacts.wheel_filename(lock, "3.99")
    with pytest.raises(errors.OverlayError) as e:
        artifacts.lock_wheel(lock, missing, cache)
    assert e.value.code == 1 and missing in str(e.value) and "by hand" in e.value.hint
