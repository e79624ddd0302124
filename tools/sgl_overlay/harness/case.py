"""The memory ledger's case: which of the three answers a patched tree's
sizing gave (docs/memory.md, "The ledger"; the ledger's ``figures.case``).

Only a tree that writes the ledger (the patched tree) has one; for the
others ``of`` gives None.
"""

from __future__ import annotations

from enum import StrEnum


class Case(StrEnum):
    FITS = "fits"  # the pools fit the budget: start
    OVER_BUDGET = "over_budget"  # the pin's pools, partly out of the headroom: start with a warning
    CANNOT_RUN = "cannot_run"  # refuse before allocating

    @classmethod
    def of(cls, ledger: dict | None) -> Case | None:
        """The case a ledger (the child's ``ledger`` dict) states, or None."""
        value = ((ledger or {}).get("figures") or {}).get("case")
        return None if value is None else cls(value)
