"""Compiled code of release trees kept on disk ($SGL_OVERLAY_CACHE, else
~/.cache/sgl-overlay, in harness-code/), by the file's path, size and mtime:
the release trees are never written to (no __pycache__ in them), and
PYTHONDONTWRITEBYTECODE does not make every harness run compile them again."""
import hashlib
import marshal
import os
import sys
from pathlib import Path

from ...project import cache_dir


def cached(path: Path, key: tuple, build):
    """What ``build()`` returns for the tree file ``path`` (marshal-able: code
    objects, lists, strings), from disk when this file, size and mtime were
    seen before with the same ``key``."""
    st = path.stat()
    ident = repr((str(path), st.st_size, st.st_mtime_ns, key, sys.version_info[:2])).encode()
    file = cache_dir() / "harness-code" / (hashlib.sha256(ident).hexdigest()[:32] + ".marshal")
    try:
        return marshal.loads(file.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    value = build()
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(marshal.dumps(value))
        os.replace(tmp, file)
    except OSError:
        pass
    return value
