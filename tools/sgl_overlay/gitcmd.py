"""Every git invocation, in one place, with configuration pinned.

A user's own git configuration (diff prefixes, context, algorithm, hooks,
signing, autocrlf, ...) must never change what is applied, hashed or
exported, so every call passes the same ``-c`` options and a scrubbed
environment (no global or system config, fixed identity and dates given
explicitly by the caller).
"""
import os
import subprocess

from .errors import OverlayError

PINNED_CONFIG = (
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "diff.context=3",
    "diff.interHunkContext=0",
    "diff.algorithm=myers",
    "diff.renames=true",
    "diff.relative=false",
    "diff.suppressBlankEmpty=false",
    "core.quotePath=true",
    "core.autocrlf=false",
    "core.eol=lf",
    "core.safecrlf=false",
    "core.fileMode=true",
    "core.symlinks=true",
    "core.ignoreCase=false",
    "core.precomposeUnicode=false",
    "core.whitespace=",
    "core.hooksPath=/dev/null",
    "core.attributesFile=/dev/null",
    "core.excludesFile=/dev/null",
    "apply.whitespace=nowarn",
    "am.keepcr=false",
    "am.threeWay=false",
    "am.messageId=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "format.signature=",
    "format.numbered=auto",
    "format.coverLetter=false",
    "format.useAutoBase=false",
    "format.thread=false",
    "format.from=",
    "format.signOff=false",
    "format.suffix=.patch",
    "mailinfo.scissors=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "init.defaultBranch=upstream",
    "advice.detachedHead=false",
    "i18n.commitEncoding=UTF-8",
    "i18n.logOutputEncoding=UTF-8",
    "log.showSignature=false",
    "color.ui=false",
    "safe.directory=*",
)

_BASE_ENV_DROP = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
                  "GIT_CONFIG_COUNT", "GIT_EXTERNAL_DIFF", "GIT_DIFF_OPTS", "GIT_PAGER",
                  "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_TRACE")

TOOL_IDENTITY = ("sgl-overlay", "sgl-overlay@localhost")


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in _BASE_ENV_DROP}
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        "LANG": "C",
        "TZ": "UTC",
        "GIT_COMMITTER_NAME": TOOL_IDENTITY[0],
        "GIT_COMMITTER_EMAIL": TOOL_IDENTITY[1],
        "GIT_AUTHOR_NAME": TOOL_IDENTITY[0],
        "GIT_AUTHOR_EMAIL": TOOL_IDENTITY[1],
    })
    if extra:
        env.update(extra)
    return env


def argv(*args):
    out = ["git"]
    for c in PINNED_CONFIG:
        out += ["-c", c]
    return out + [str(a) for a in args]


class GitFailed(OverlayError):
    def __init__(self, args, rc, stdout, stderr):
        super().__init__(f"git {' '.join(map(str, args))[:200]} exited {rc}: {stderr.strip() or stdout.strip()}",
                         hint="git itself failed; check the disk and the paths involved, or report this")
        self.args_ = args
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


def run(cwd, *args, input=None, env=None, check=True, binary=False):
    """Run git in ``cwd``; return a CompletedProcess (text unless binary)."""
    p = subprocess.run(argv(*args), cwd=cwd, input=input, capture_output=True,
                       env=clean_env(env), text=not binary)
    if check and p.returncode != 0:
        err = p.stderr.decode(errors="replace") if binary else p.stderr
        out = p.stdout.decode(errors="replace") if binary else p.stdout
        raise GitFailed(args, p.returncode, out, err)
    return p


def out(cwd, *args, **kw):
    return run(cwd, *args, **kw).stdout.strip()


def init(path, bare=False):
    args = ["init", "-q", "--initial-branch=upstream"] + (["--bare"] if bare else []) + [str(path)]
    run(None, *args)


def popen(cwd, *args, env=None):
    """A git process reading from a pipe (stdout/stderr discarded)."""
    return subprocess.Popen(argv(*args), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=clean_env(env))


# --------------------------------------------------------------------------
# the verbs the tools share, each git command's flags written once

AM_FLAGS = ("--quiet", "--committer-date-is-author-date", "--keep-non-patch")


def am(cwd, mail, *flags):
    """``git am`` of the mail file ``mail`` with ``AM_FLAGS`` (the commit
    keeps the mail's author date as its committer date; a subject's
    ``[...]`` prefixes other than ``[PATCH]`` are kept) and ``flags``
    (``--3way`` or ``--no-3way``, ``--rerere-autoupdate``).  Not checked: a
    failure leaves git am stopped, for ``am_continue``, ``am_abort`` or a
    person; the CompletedProcess says what git said."""
    return run(cwd, "am", *AM_FLAGS, *flags, str(mail), check=False)


def am_continue(cwd):
    """``git am --continue``: commit the resolution staged in a stopped git
    am (not checked: the CompletedProcess says whether it did)."""
    return run(cwd, "am", "--continue", check=False)


def am_abort(cwd):
    """``git am --abort``: HEAD and the tree back where git am started
    (nothing to abort is no error)."""
    run(cwd, "am", "--abort", check=False)


def am_quit(cwd):
    """``git am --quit``: forget a stopped git am's state, HEAD and the tree kept."""
    run(cwd, "am", "--quit")


def reset_hard(cwd, rev):
    """HEAD, the index and the work tree at ``rev`` (``git reset --hard``)."""
    run(cwd, "reset", "--quiet", "--hard", rev)


def rerere_on(cwd):
    """Recorded conflict resolutions (git rerere) on, a resolution they give staged."""
    run(cwd, "config", "rerere.enabled", "true")
    run(cwd, "config", "rerere.autoUpdate", "true")


def head(cwd):
    """The commit HEAD names."""
    return out(cwd, "rev-parse", "HEAD")


def commit_of(cwd, rev):
    """The commit ``rev`` names in ``cwd``, or None where it names none."""
    p = run(cwd, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def format_patch(cwd, commit):
    """One commit as a mail (``git format-patch -1 --stdout``, no signature)."""
    return run(cwd, "format-patch", "-1", "--stdout", "--no-signature", commit).stdout


def range_diff(cwd, old, new):
    """``git range-diff`` of the range ``old`` against the range ``new``
    (text, no colour)."""
    return run(cwd, "range-diff", "--no-color", old, new).stdout


def patch_ids(text):
    """``[(stable patch-id, commit)]`` of the patches in ``text`` (a mail,
    or ``git log -p`` output), in order; no repository is read."""
    p = subprocess.run(argv("patch-id", "--stable"), input=text, capture_output=True, text=True, env=clean_env())
    return [tuple(l.split()) for l in p.stdout.splitlines() if l.strip()]
