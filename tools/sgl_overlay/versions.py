"""Version numbers and wheel names, parsed by ``packaging`` (PEP 440, the
wheel-name spec) in one place: the lock, the release lists of bisect and
plan, ``stack.py --onto`` and the artifact cache all call these."""
import re
from email.parser import HeaderParser

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import parse_tag
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version


def release(text, dev=False):
    """``text`` as a comparable :class:`Version` when it is a release number
    written the way PyPI lists it (``0.5.12``, ``0.5.13rc1``,
    ``0.5.12.post1``; with ``dev``, also ``.devN``), else None.

    Only the normalized spelling is accepted (``v0.5.12``, ``0.5.12-post1``
    or ``0.05.1`` are not release numbers here), and never an epoch or a
    local label: a release number names one published artifact."""
    try:
        v = Version(text or "")
    except (InvalidVersion, TypeError):
        return None
    if str(v) != text or v.epoch or v.local is not None or (v.dev is not None and not dev):
        return None
    return v


def wheel(filename):
    """``(name, version, tags)`` of a wheel file name as the name spells
    them (``sglang``, ``0.5.12.post1``, ``cp311-cp311-manylinux_2_34_x86_64``),
    after ``packaging`` has validated it; None when it is not a wheel name."""
    try:
        parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    parts = filename[:-len(".whl")].split("-")
    return parts[0], parts[1], "-".join(parts[-3:])


def artifact(filename):
    """``(name, version)`` of a wheel or sdist (``.tar.gz``, ``.zip``) file
    name as the name spells them; None for anything else."""
    w = wheel(filename)
    if w:
        return w[:2]
    try:
        parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidVersion):
        return None
    stem = filename[:-len(".tar.gz")] if filename.endswith(".tar.gz") else filename[:-len(".zip")]
    name, _, version = stem.rpartition("-")
    return name, version


# The platform the overlay builds for; a pure wheel (py3-none-any) is taken
# to be installed there.
TARGET_TAGS = "cp311-cp311-manylinux_2_34_x86_64"


def environment(tags):
    """The PEP 508 marker environment of the Linux platform a wheel's tags
    name (``TARGET_TAGS`` for what they leave open)."""
    tag, target = next(iter(parse_tag(tags))), next(iter(parse_tag(TARGET_TAGS)))
    interp = tag.interpreter if re.fullmatch(r"cp3\d+", tag.interpreter) else target.interpreter
    plat = tag.platform if "linux" in tag.platform else target.platform
    py = f"{interp[2]}.{interp[3:]}"
    return default_environment() | {
        "implementation_name": "cpython", "platform_python_implementation": "CPython",
        "python_version": py, "python_full_version": f"{py}.0", "implementation_version": f"{py}.0",
        "os_name": "posix", "sys_platform": "linux", "platform_system": "Linux",
        "platform_machine": re.sub(r"^(many|musl)?linux(_\d+_\d+|\d+)?_", "", plat), "extra": ""}


def requirements(metadata, tags):
    """Every ``Requires-Dist`` of a wheel's METADATA text that applies on the
    platform ``tags`` name, as ``packaging`` Requirements: a marker is
    evaluated there (optional extras never apply); unparsable lines are
    skipped."""
    env = environment(tags)
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate(env):
            yield req


def pins(metadata, tags):
    """``{name: version}`` for every ``Requires-Dist: NAME==VERSION`` in a
    wheel's METADATA text that applies on the platform ``tags`` name: a
    marker is evaluated there (optional extras never apply), ``NAME[extra]``
    is the pin of NAME; ranges, wildcards and bare names are not pins."""
    out = {}
    for req in requirements(metadata, tags):
        spec = list(req.specifier)
        if len(spec) == 1 and spec[0].operator in ("==", "===") and "*" not in spec[0].version:
            out[req.name] = spec[0].version
    return out
