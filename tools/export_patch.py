#!/usr/bin/env python3
"""Export commits of a built tree as patch files, with this project's pinned
git configuration (so a user's own git config never changes the output).

  python tools/export_patch.py --tree build/sglang REV [REV...] --to patches/

Each REV is written as patches/<name>.patch, the name taken from the
commit's subject unless given as REV=NAME. Add the names to patches/series.
(`python tools/stack.py refresh` regenerates all of patches/ from a tree.)
"""
import os
import sys

sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

from tools.sglo import cli, gitcmd, stack  # noqa: E402
from tools.sglo.errors import UsageError  # noqa: E402


def main(argv):
    ap = argparse.ArgumentParser(prog="python tools/export_patch.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True)
    ap.add_argument("--to", default="patches")
    ap.add_argument("revs", nargs="+", metavar="REV[=NAME]")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = []
    for spec in args.revs:
        rev, _, name = spec.partition("=")
        p = gitcmd.run(args.tree, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        if p.returncode:
            raise UsageError(f"{args.tree}: no commit {rev!r}", hint="give a commit of the built tree")
        commit = p.stdout.strip()
        name = name or stack.slug(gitcmd.out(args.tree, "log", "-1", "--format=%s", commit)) + ".patch"
        text = stack.format_patch(args.tree, commit)
        Path(args.to, name).write_text(text)
        out.append({"commit": commit, "file": str(Path(args.to, name))})
    cli.emit({"exported": out}, args.json, "\n".join(f"{o['commit'][:12]} -> {o['file']}" for o in out))
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
