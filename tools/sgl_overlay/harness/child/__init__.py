"""The child interpreter's side of the harness: what runs in ``python -m sgl_overlay.harness.child``
(``__main__``), one per run, and nothing the parent imports (the parent reads the child's result through
``harness.protocol``).

- ``__main__``: the entry, one job per process (a sizing, or a flag parse: ``flags``)
- ``setup``: the import environment both jobs run in (the stand-ins, the targeted ``loader``)
- ``drivers/``: the upstream sizing code driven per layout era; ``resolution``: the release's own
  flag resolution; ``release_parser``: its flag parser; ``standins``, ``scoped``: the stand-ins
- ``release_window``, ``rope_reserve``: what the release reads between the readings
- ``allocation``: the pools built on torch's meta device; ``code_cache``: compiled code kept
- ``errors``: an exception as the protocol's error record
"""
