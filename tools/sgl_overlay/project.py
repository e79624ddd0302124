"""Where the project's own files are: the checkout that holds upstream.lock,
patches/ and overlay/.

The package is installed from the checkout (``pip install -e .``), so the
checkout is two folders above this file.  Every command takes ``--root`` to
point at another one.
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUILD = ROOT / "build" / "sglang"
