"""Scripts run as `python tools/DIR/NAME.py` have their folder as sys.path[0]:
a script there named like a standard-library module would be imported in its
place by every script beside it (tools/bench/bisect.py once broke
tools/bench/ddtree.py through random -> bisect).  The shims in tools/ are
the exception that proves it: they import only os and sys, then re-execute
with -P."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_script_folder_shadows_the_standard_library():
    shadows = [str(f.relative_to(ROOT)) for d in ("tools/bench", "tools/gpu") for f in (ROOT / d).glob("*.py")
               if f.stem in sys.stdlib_module_names]
    assert shadows == []


GUARD = 'if __name__ != "__main__": raise ImportError('
LAUNCH = "_launch.py"


def test_the_shims_import_nothing_but_os_and_sys_before_re_executing():
    for shim in (ROOT / "tools").glob("*.py"):
        if shim.name == LAUNCH:
            continue
        code = [line for line in shim.read_text().splitlines() if line and not line.startswith(('"', "#"))]
        assert code[0] == "import os, sys  # noqa: E401", shim
        # a shim named like a standard-library module refuses to be imported as it
        guarded = shim.stem in sys.stdlib_module_names
        if guarded:
            assert code[1].startswith(GUARD), shim
        # the shim's own checkout, for the command it starts (sgl_overlay.project.find_root)
        assert code[1 + guarded] == ('os.environ["SGL_OVERLAY_SHIM_CHECKOUT"] = '
                                     'os.path.dirname(os.path.dirname(os.path.abspath(__file__)))'), shim
        # re-executed with -P (tools/ off sys.path) through the one launcher, which says how to install
        # the package where it is missing
        assert code[2 + guarded] == ('os.execv(sys.executable, [sys.executable, "-P", os.path.join(os.path.dirname('
                                     f'os.path.abspath(__file__)), "{LAUNCH}"), "{shim.stem}", *sys.argv[1:]])'), shim
        assert len(code) == 3 + guarded, shim


def test_tools_on_pythonpath_is_an_error_not_a_loop():
    """With tools/ on PYTHONPATH, `import random` (which imports bisect) found tools/bisect.py,
    which re-executed itself forever; now the import fails at once and says why."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    r = subprocess.run([sys.executable, "-c", "import random"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "imported in place of the standard library's bisect" in r.stderr and "take it off" in r.stderr, r.stderr


# A kind, outcome, verdict, status or case is an enum of the library, compared as one, never a string
# (issue 43).  Those left are in the folders being restructured (stack/); the list may only shrink.
STRING_COMPARE = r'(outcome|verdict|status|case|kind)\s*(==|!=)\s*["\']'
LEFT = {"stack/roll.py"}


def test_no_string_compare_of_a_kind_outcome_verdict_or_status():
    import re

    library = ROOT / "tools" / "sgl_overlay"
    found = sorted({f.relative_to(library).as_posix() for f in library.rglob("*.py")
                    if re.search(STRING_COMPARE, f.read_text())})
    assert set(found) <= LEFT, sorted(set(found) - LEFT)
