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
                                          ("0.5.10rc0", "0.5.10rc0"), ("1234567", None), ("v0.5.14", None)])
def test_stack_onto_tells_versions_from_commits(spec, version):
    assert onto_of(spec, repo="/some/repo").version == version


METADATA = """\
Metadata-Version: 2.4
Name: sglang
Version: 0.5.12.post1
Requires-Dist: torch==2.11.0
Requires-Dist: nvidia-cutlass-dsl[cu13]==4.5.1
Requires-Dist: torchcodec==0.11.1; sys_platform != "linux" or (sys_platform == "linux" and platform_machine != "aarch64")
Requires-Dist: av==14.0; sys_platform == "linux" and platform_machine == "aarch64"
Requires-Dist: old-py==1.0; python_version < "3.10"
Requires-Dist: transformers == 5.6.0
Requires-Dist: pytest==8.0; extra == "test"
Requires-Dist: llguidance<0.8.0,>=0.7.11
Requires-Dist: numpy
Requires-Dist: loose==2.*

long description: Requires-Dist: fake==1.0
"""


def test_pins_with_markers_extras_and_spaces():
    # the old regex dropped every pin followed by a marker (torchcodec here)
    # and every "name == version" written with spaces
    assert versions.pins(METADATA, "cp311-cp311-manylinux_2_34_x86_64") == {
        "torch": "2.11.0", "nvidia-cutlass-dsl": "4.5.1", "torchcodec": "0.11.1", "transformers": "5.6.0"}


def test_pins_follow_the_wheel_platform():
    assert versions.pins(METADATA, "cp311-cp311-manylinux_2_34_aarch64") == {
        "torch": "2.11.0", "nvidia-cutlass-dsl": "4.5.1", "av": "14.0", "transformers": "5.6.0"}
    assert "old-py" in versions.pins(METADATA, "cp39-cp39-manylinux_2_34_x86_64")
    assert versions.pins(METADATA, "py3-none-any") == versions.pins(METADATA, versions.TARGET_TAGS)
