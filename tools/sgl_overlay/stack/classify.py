"""A patch's status on a new upstream, and its classification: a pure
function of what git reported for the patch."""
import enum


class Status(enum.StrEnum):
    """The status of one patch after a rebase (its value is the report's word)."""
    APPLIED = "applied"
    APPLIED_3WAY = "applied-3way"
    MERGED_UPSTREAM = "merged-upstream"
    EMPTIED = "emptied"
    CONFLICT = "conflict"
    PROBABLY_UPSTREAM = "probably-upstream"
    PORTED = "ported"       # not from git: a ported series for that upstream carries it (ports.mark_ported)


RESOLVED = (Status.APPLIED, Status.APPLIED_3WAY, Status.MERGED_UPSTREAM, Status.EMPTIED)
UNRESOLVED = (Status.CONFLICT, Status.PROBABLY_UPSTREAM, Status.PORTED)
APPLIES = (Status.APPLIED, Status.APPLIED_3WAY)            # the patch is in the rebased tree
LEAVES_SERIES = (Status.MERGED_UPSTREAM, Status.EMPTIED)    # nothing left to carry


def classify(forward, reverse, patch_id_match, three_way, three_way_empty, reverse_reduced):
    """The status of one patch on a new upstream, from what was tried:
    ``forward`` strict git am worked; ``reverse`` it applies in reverse
    exactly; ``patch_id_match`` an upstream commit in the range has the same
    stable patch-id; ``three_way`` git am --3way worked; ``three_way_empty``
    the 3-way merge left nothing to change; ``reverse_reduced`` it applies
    in reverse with one line of context (a person should confirm)."""
    if forward:
        return Status.APPLIED
    if reverse or patch_id_match:
        return Status.MERGED_UPSTREAM
    if three_way_empty:
        return Status.EMPTIED
    if three_way:
        return Status.APPLIED_3WAY
    if reverse_reduced:
        return Status.PROBABLY_UPSTREAM
    return Status.CONFLICT
