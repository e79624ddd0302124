"""The memory ledger against the allocator (pure; tests/gpu/test_e2e_pools.py):
every byte figure of the patched tree's JSON ledger (`reservations`:
`kv_cache`, `draft_kv`, `mamba_states`, `speculative_intermediate_states`)
against the bytes the server's pools actually hold, as the allocation probe
(tools/gpu/probe) recorded them inside the server process.

Which tensors make which reservation (sglang/srt/mem_cache/memory_pool.py at
v0.5.12.post1): a KV pool's `k_buffer` + `v_buffer` (the target's pool, or the
draft worker's for `draft_kv`); MambaPool's `mamba_cache.conv` +
`mamba_cache.temporal` (the states) and `mamba_cache.intermediate_ssm` +
`mamba_cache.intermediate_conv_window` (speculative verify's per-draft-token
states); from v0.5.17 the conv windows' storage is `_intermediate_conv_window_phys`
(the pool's `intermediate_conv_window` is a view of it, deduplicated for a linear
draft chain), and the probe counts each storage once, under the first attribute
that holds it."""

PARTS = {
    "kv_cache": ("MHATokenToKVPool", False, ("k_buffer", "v_buffer")),
    "draft_kv": ("MHATokenToKVPool", True, ("k_buffer", "v_buffer")),
    "mamba_states": ("MambaPool", None, ("mamba_cache.conv", "mamba_cache.temporal")),
    "speculative_intermediate_states": ("MambaPool", None,
                                        ("mamba_cache.intermediate_ssm", "mamba_cache.intermediate_conv_window",
                                         "_intermediate_conv_window_phys")),
}


def allocated(pools):
    """{reservation name: bytes held} from the probe's pool records (all processes)."""
    out = {}
    for name, (wrapped, draft, parts) in PARTS.items():
        hits = [p for p in pools if p["wrapped"] == wrapped and (draft is None or bool(p.get("draft")) == draft)]
        b = sum(v for p in hits for k, v in p["tensor_bytes"].items() if k in parts)
        if hits and (b or name != "speculative_intermediate_states"):
            out[name] = b
    return out


def compare(ledger, pools):
    """Rows {name, ledger_bytes, allocated_bytes, diff, equal, note}: every
    reservation of the ledger, and every pool the ledger does not name."""
    res = ledger.get("reservations", {})
    fig = ledger.get("figures", {})
    got = allocated(pools)
    cells = {"kv_cache": fig.get("target_cell_size_bytes")}
    if fig.get("cell_size_bytes") and fig.get("target_cell_size_bytes"):
        cells["draft_kv"] = fig["cell_size_bytes"] - fig["target_cell_size_bytes"]
    rows = []
    for name in sorted(set(res) | set(got)):
        lb = res.get(name, {}).get("bytes") if isinstance(res.get(name), dict) else None
        ab = got.get(name)
        row = {"name": name, "ledger_bytes": lb, "allocated_bytes": ab,
               "diff": None if lb is None or ab is None else ab - lb}
        row["equal"] = row["diff"] == 0
        if lb is None:
            row["note"] = "allocated, not in the ledger"
        elif ab is None:
            row["note"] = "in the ledger, no such pool allocated"
        elif row["diff"] and cells.get(name) and row["diff"] % cells[name] == 0:
            row["note"] = f"{row['diff'] // cells[name]} KV cell(s) of {cells[name]} B (the pool's padded slots)"
        rows.append(row)
    return rows


def equal(rows):
    return all(r["equal"] for r in rows)


def summary(rows):
    bad = [r for r in rows if not r["equal"]]
    return "ledger = allocated for " + ", ".join(r["name"] for r in rows if r["equal"]) if not bad else \
        "; ".join(f"{r['name']}: ledger {r['ledger_bytes']} B, allocated {r['allocated_bytes']} B"
                  + (f" ({r['note']})" if r.get("note") else "") for r in bad)
