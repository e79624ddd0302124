"""Verdicts in words, and the verdict record."""
from .terms import NEW


def words(v, rng, fixed, results):
    """The verdict as plain sentences (first line: the answer)."""
    good, bad = ("fails", "passes") if fixed else ("passes", "fails")
    def name(pid):
        p = rng.point(pid)
        return f"{p.short()} ({p.label})" if rng.kind == "commits" else p.id
    def out(pid):
        r = [x for x in results if x["point"] == pid]
        return r[-1].get("summary") or r[-1].get("output", "").strip()[-600:] if r else ""
    kind = v["verdict"]
    if kind == "first-new":
        head = (f"first fixed: {name(v['first_new'])}; last failing before it: {name(v['last_old'])}" if fixed else
                f"first bad: {name(v['first_new'])}; last good before it: {name(v['last_old'])}")
        lines = [head]
    elif kind == "not-in-range":
        ep = name(v["endpoint"])
        if v.get("merge_base"):
            lines = [f"not in range: the merge base {ep} already {bad} the test, so the change is "
                     "older than where the two refs' histories fork"]
        elif fixed:
            lines = [f"not in range: the old endpoint {ep} already passes: it was fixed before this range "
                     "(or the environment changed), not by a change inside it"]
        else:
            lines = [f"not in range: the good endpoint {ep} fails too: the environment changed or the failure is "
                     "older; no change in this range is the cause"]
        lines.append(f"the test at {ep} said: {out(v['endpoint'])}")
        if v["new_end_term"] == NEW:
            lines.append(f"it {bad} at both ends; at {name(v['new_end'])} the test said: {out(v['new_end'])}")
        else:
            lines.append(f"the new end {name(v['new_end'])} does not {'pass' if fixed else 'fail'} either ({v['new_end_term']}): "
                         "check the range's direction (--fixed)")
    elif kind == "cannot-reproduce":
        ep = name(v["endpoint"])
        lines = [f"cannot reproduce: the {'new' if fixed else 'bad'} endpoint {ep} {'still fails' if fixed else 'passes'}",
                 f"the test at {ep} said: {out(v['endpoint'])}"]
    elif kind == "inconclusive" and "endpoint" in v:
        ep = name(v["endpoint"])
        lines = [f"inconclusive: the endpoint {ep} is untestable, so the range cannot be verified",
                 f"why: {out(v['endpoint'])}"]
    elif kind == "inconclusive":
        lines = [f"inconclusive: the {'fix' if fixed else 'change'} is in {name(v['first_new'])} or one of the "
                 f"{len(v['skipped'])} skipped point(s) after {name(v['last_old'])}:"]
        lines += [f"  skipped {name(pid)}: {out(pid)}" for pid in v["skipped"]]
    elif kind == "flaky":
        lines = [f"flaky: repeated runs at {name(v['point'])} disagreed ({', '.join(v['runs'])}); "
                 "fix the test or the machine before bisecting"]
    else:
        lines = [kind]
    if v.get("non_monotonic"):
        lines.append("note: later point(s) behaved like the old end again: "
                     + ", ".join(name(x) for x in v["non_monotonic"]) + " (the property is not monotonic here)")
    return lines


def finish(v, rng, fixed, results):
    """The verdict record: public name, points with their labels, the
    steps that led there, and the words."""
    rec = dict(v)
    if v["verdict"] == "first-new":
        rec["verdict"] = "first-fixed" if fixed else "first-bad"
    for k in ("first_new", "last_old", "endpoint", "point"):
        if k in v:
            p = rng.point(v[k])
            rec[k] = {"id": p.id, "label": p.label, "ref": p.ref}
    if "skipped" in v:
        rec["skipped"] = [{"id": pid, "label": rng.point(pid).label,
                           "why": next((r.get("summary") or r.get("output", "")[-300:]) for r in reversed(results)
                                       if r["point"] == pid)} for pid in v["skipped"]]
    rec["steps"] = [{"point": r["point"], "label": rng.point(r["point"]).label, "phase": r.get("phase"),
                     "result": r["raw"], "term": r["term"], "seconds": r.get("seconds"),
                     **({"dropped": r["notes"]["dropped"]} if r.get("notes", {}).get("dropped") else {})}
                    for r in results]
    rec["executions"] = len(results)
    rec["fixed"] = fixed
    rec["words"] = words(v, rng, fixed, results)
    return rec
