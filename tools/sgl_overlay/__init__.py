"""sgl-overlay: a pinned upstream SGLang plus a patch stack.

Modules, one concept each:
  errors   exit codes and the error type every tool raises
  gitcmd   every git invocation, with pinned configuration
  lock     reading and validating upstream.lock
  source   getting a verified upstream tree (release artifact or git)
  series   patches/series, the patch mails, the overlay, the stack digest
  builder  base + series + overlay -> patched tree, atomically, with a manifest
  wheel    the installable patched wheel
  cli      what the command-line scripts share (progress, --json, exit)
"""

TOOL_VERSION = "0.1.0"
