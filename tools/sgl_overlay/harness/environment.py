"""The SGLang settings a sizing runs under: the ``SGLANG_*`` environment variables.

SGLang takes many settings from the environment (``srt/environ.py``: ``envs.NAME.get()`` reads
``os.environ`` when it is called; ``get_bool_env_var`` elsewhere), and some change the
figures: ``SGLANG_MAMBA_CONV_DTYPE`` the bytes of a Mamba slot (``configs/mamba_utils.py``),
``SGLANG_VLM_CACHE_SIZE_MB`` the budget a multimodal model keeps back (v0.5.18+), the
``SGLANG_ROPE_CACHE_*`` margins.  Every release also reads ``SGL_*`` as the deprecated
spelling of ``SGLANG_*`` (``environ.py`` copies each to its new name at import:
``_convert_SGL_to_SGLANG``, from v0.5.18 ``_handle_deprecated_envs``).

The harness's child interpreter inherits the caller's environment, as a server started from
the same shell would, so these settings are honoured; this module names them, so that a
report says which were in effect.  Pure: the caller passes the environment.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

# The prefixes SGLang reads its own settings under (SGL_ is the deprecated spelling).
PREFIXES = ("SGLANG_", "SGL_")
# This project's own variables (SGL_OVERLAY_CACHE, SGL_OVERLAY_TEST_CACHE) share the old
# prefix; no release declares a setting under it, so they are not SGLang's.
OWN_PREFIX = "SGL_OVERLAY_"


def sglang_settings(env: Mapping[str, str]) -> dict[str, str]:
    """The SGLang settings in ``env``, name -> value, sorted by name; {} when none is set."""
    return {k: env[k] for k in sorted(env) if k.startswith(PREFIXES) and not k.startswith(OWN_PREFIX)}


def assignments(settings: Mapping[str, str]) -> str:
    """``NAME=value ...``, shell-quoted: written before a command, it runs that command under
    the settings; "" when there are none."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())


def describe(settings: Mapping[str, str]) -> str | None:
    """One line for people naming the settings, or None when there are none."""
    if not settings:
        return None
    return f"environment: {assignments(settings)} (read by SGLang, as its server would read them)"
