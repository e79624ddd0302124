"""Patch texts: one commit as a mail, compared modulo noise; stable
patch-ids; a patch file's name from its subject."""
import re
import subprocess

from .. import gitcmd, series


_INDEX = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+( \d+)?$", re.M)
_HUNK = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", re.M)
_STAT = re.compile(r"\n---\n.*?\n\ndiff --git ", re.S)


def noise_free(text):
    """A patch mail without what a re-export changes although the change is
    the same: the From <commit> line, the diffstat, index lines, hunk line
    numbers and the signature."""
    text = series.normalized(text.encode()).decode()
    text = _STAT.sub("\n---\n\ndiff --git ", text, count=1)
    text = _INDEX.sub("index", text)
    return _HUNK.sub("@@", text)


def format_patch(tree, commit):
    """One commit as a mail, with the pinned git configuration."""
    return gitcmd.run(tree, "format-patch", "-1", "--stdout", "--no-signature", commit).stdout


def patch_id(text):
    p = subprocess.run(gitcmd.argv("patch-id", "--stable"), input=text, capture_output=True, text=True,
                       env=gitcmd.clean_env())
    return p.stdout.split()[0] if p.stdout.strip() else None


def slug(subject):
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return "-".join(s.split("-")[:6]) or "patch"
