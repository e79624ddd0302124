"""Version numbers and wheel names, parsed by ``packaging`` (PEP 440, the
wheel-name spec) in one place: the lock, the release lists of bisect and
plan, ``stack.py --onto`` and the artifact cache all call these."""
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
