"""Patch texts: one commit as a mail, compared modulo noise; stable
patch-ids; a patch file's name from its subject."""
import re

from .. import gitcmd, series

format_patch = gitcmd.format_patch     # one commit as a mail (the stack's modules name it from here)


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


_TRAILER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: \S")


def add_trailers(text, trailers):
    """The mail ``text`` with each ``(name, value)`` of ``trailers`` added to
    its message's trailer block (the last paragraph before the ``---`` line),
    in order; a name the block already has is kept as written there."""
    end = text.find("\n---\n")
    message, rest = (text, "") if end < 0 else (text[:end], text[end:])
    message = message.rstrip("\n")
    head, sep, last = message.rpartition("\n\n")
    block = last.split("\n")
    is_block = bool(sep) and all(_TRAILER.match(l) for l in block if l)
    have = {l.split(":", 1)[0].lower() for l in block} if is_block else set()
    new = [f"{k}: {v}" for k, v in trailers if k.lower() not in have and v]
    if not new:
        return text
    return message + ("\n" if is_block else "\n\n") + "\n".join(new) + "\n" + (rest[1:] if rest else "")


def patch_id(text):
    """The stable patch-id of the mail ``text`` (None: it holds no change)."""
    ids = gitcmd.patch_ids(text)
    return ids[0][0] if ids else None


def slug(subject):
    s = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    return "-".join(s.split("-")[:6]) or "patch"
