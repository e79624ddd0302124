"""Third-party modules the tools import at run time, by the extra of
pyproject.toml that declares them, and the error that names what to
install when one is missing (exit 2, never a traceback).

A missing package is an environment error, not a property of the tree
under test: a run that meets one stops and names it (docs/dependencies.md).
"""
import importlib.util
import sys

from .errors import UsageError

# extra -> the modules it provides that the tools import
EXTRAS = {
    # SGLang's own sizing modules, run on a CPU by tools/regress.py,
    # tools/plan.py and tools/bisect.py --scenario
    "harness": ("torch", "numpy", "msgspec", "orjson"),
    # tools/plan.py's weights estimate from config.json alone (planner/weights.py)
    "plan": ("transformers",),
}


class MissingDependency(UsageError):
    """A third-party package the tools need is not installed."""

    def __init__(self, package, needed_by, extra=None):
        extra = extra or extra_of(package)
        install = f"python -m pip install -e '.[{extra}]'" if extra else f"python -m pip install {package}"
        super().__init__(f"{needed_by} needs the Python package {package!r}, which is not installed "
                         f"for {sys.executable}",
                         hint=f"install it: {install} (docs/dependencies.md)")
        self.package = package


def extra_of(package):
    top = package.split(".")[0]
    return next((name for name, mods in EXTRAS.items() if top in mods), None)


def importable(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # an import hook that refuses it
        return False


def missing(modules):
    """The modules of ``modules`` that cannot be imported here."""
    return [m for m in modules if not importable(m)]


def require(extra, needed_by):
    """Raise MissingDependency for the first module of ``extra`` that is missing."""
    gone = missing(EXTRAS[extra])
    if gone:
        raise MissingDependency(gone[0], needed_by, extra)


def third_party_missing(module_name):
    """For a ModuleNotFoundError's ``name``: the top-level package if it is
    neither SGLang itself nor importable here (an environment error), else None."""
    if not module_name:
        return None
    top = module_name.split(".")[0]
    if top == "sglang":
        return None
    return None if importable(top) else top
