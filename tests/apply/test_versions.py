"""sgl_overlay.versions: release numbers and wheel names through packaging."""
import pytest

from sgl_overlay import versions
from sgl_overlay.commands.stack import onto_of


@pytest.mark.parametrize("text", ["0.5.12", "0.5.12.post1", "0.5.13rc1", "0.5.13a2.post1", "1"])
def test_release_numbers(text):
    assert str(versions.release(text)) == text


@pytest.mark.parametrize("text", ["", None, "v0.5.12", "0.5.12-post1", "0.5.12post1", "0.05.1", "1!0.5",
                                  "0.5+local", "0.5.dev1", "deadbeef", " 0.5.12"])
def test_not_release_numbers(text):
    assert versions.release(text) is None


def test_order_is_pep440():
    vs = ["0.5.12.post1", "0.5.9", "0.5.12", "0.5.13rc1", "0.5.13", "0.5.13a1", "0.5.13b1", "0.5.10.post2", "0.5.10"]
    assert sorted(vs, key=versions.release) == [
        "0.5.9", "0.5.10", "0.5.10.post2", "0.5.12", "0.5.12.post1", "0.5.13a1", "0.5.13b1", "0.5.13rc1", "0.5.13"]
    assert versions.release("0.5.10") > versions.release("0.5.9")  # not string order
    assert versions.release("0.5") == versions.release("0.5.0")


def test_dev_only_when_asked():
    assert versions.release("0.5.13.dev0", dev=True) < versions.release("0.5.13rc1")


def test_wheel_and_sdist_names():
    assert versions.wheel("sglang-0.5.12.post1-cp311-cp311-manylinux_2_34_x86_64.whl") == (
        "sglang", "0.5.12.post1", "cp311-cp311-manylinux_2_34_x86_64")
    assert versions.wheel("sglang-0.5.12.post1-1-py3-none-any.whl") == ("sglang", "0.5.12.post1", "py3-none-any")
    assert versions.wheel("sglang-0.5.12.post1-py3-none.whl") is None
    assert versions.wheel("sglang-0.5.12.tar.gz") is None
    assert versions.artifact("sglang-0.5.12.post1.tar.gz") == ("sglang", "0.5.12.post1")
    assert versions.artifact("sglang-0.4.0.zip") == ("sglang", "0.4.0")
    assert versions.artifact("sglang-0.5.12.post1-py3-none-any.whl") == ("sglang", "0.5.12.post1")
    assert versions.artifact("sglang-0.5.12.post1.tar.bz2") is None


@pytest.mark.parametrize("spec,version", [("0.5.14", "0.5.14"), ("0.5.12.post1", "0.5.12.post1"),
                                          ("0.5.15rc2", "0.5.15rc2"), ("1234567", None), ("v0.5.14", None)])
def test_stack_onto_tells_versions_from_commits(spec, version):
    assert onto_of(spec, repo="/some/repo").version == version
