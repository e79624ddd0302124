"""A ready-to-file upstream bug report in Markdown, from a bisection's evidence.

``render(evidence)`` is pure: the text is a function of the evidence alone,
which ``evidence.collect`` gathers (I/O) after a ``first-bad`` verdict:

* ``verdict``: the verdict record (``verdict.Record.to_json``), with its steps;
* ``range``: ``kind`` (releases | commits), ``old_ref``, ``new_ref``,
  ``merge_base`` (commits, when the good ref is off the bad one's line),
  ``size`` (points bisected);
* ``public_repo``: the upstream repository cited (the lock's), never the
  clone the bisection read;
* ``command``: the command that writes this report again;
* ``scenario``: ``name``, ``file`` (path in this project), ``text`` (the file);
* ``last_good``, ``first_bad``: the harness's reports (tools/regress.py
  --json) on the two trees;
* ``remedy_reruns``: for each stated remedy the harness did not re-run
  ("already satisfied"), the report of the scenario re-run with it applied;
* ``working_values``: for a failing "above X" remedy, the harness's searches
  for the smallest value that starts the scenario, and for the smallest that
  gives back the last good point's figures (``evidence.searches``);
* ``environment``: ``python``, ``torch``, ``platform``, ``project_commit``,
  ``project_dirty``, ``tool_version``, ``sglang_settings`` (the ``SGLANG_*`` the
  runs inherited: the report's commands are written under them).

docs/bisect.md, section "Bug reports (--report)".
"""
import re
import tomllib

from ..harness.draft_reading import CITATION, overstated
from ..harness.outcome import Outcome
from ..harness.environment import assignments
from .range import RangeKind

PR = re.compile(r"\(#(\d+)\)")
FIGURES = (                             # harness figure -> what the report calls it
    ("max_total_num_tokens", "KV cache tokens"),
    ("max_running_requests", "running requests"),
    ("max_mamba_cache_size", "Mamba state slots"),
    ("available_bytes", "KV budget after reservations (bytes)"),
    ("cell_size_bytes", "KV bytes per token"),
    ("mamba_cache_per_req_bytes", "Mamba state bytes per slot"),
    ("speculative_num_draft_tokens", "draft tokens per verify step"),
    ("max_running_requests_flag", "--max-running-requests given"),
)


def pull_requests(subject):
    """The pull-request numbers in a commit subject, in order: a squash merge
    ends with ``(#N)``; a cherry-pick names the original first, then its own."""
    return PR.findall(subject or "")


def _num(v):
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _flag(key):
    return "--" + key.replace("_", "-")


def launch_flags(server):
    """The scenario's [server] table as launch_server flags (true booleans
    as bare flags, false ones left out: they are the defaults)."""
    out = []
    for k, v in server.items():
        if v is True:
            out.append(_flag(k))
        elif v is False or v is None:
            continue
        else:
            out.append(f"{_flag(k)} {v}")
    return out


class _Point:
    """One side of the first bad change, named for an upstream reader."""

    def __init__(self, rec, kind: RangeKind, repo):
        self.id, self.label, self.ref = rec["id"], rec.get("label", ""), rec.get("ref", "")
        self.commit, self.repo = kind is RangeKind.COMMITS, repo.rstrip("/")
        self.prs = pull_requests(self.label) if self.commit else []

    @property
    def short(self):
        return self.id[:10] if self.commit else "v" + self.id

    def name(self):
        """``59ef3b15cc (#32184)`` or ``v0.5.17``."""
        return self.short + (f" (#{self.prs[0]})" if self.prs else "")

    def link(self):
        if self.commit:
            return f"[`{self.short}`]({self.repo}/commit/{self.id})"
        return f"[`{self.short}`]({self.repo}/releases/tag/{self.short})"

    def pr_links(self):
        if not self.prs:
            return "—"
        links = [f"[#{n}]({self.repo}/pull/{n})" for n in self.prs]
        return links[0] + (" (cherry-picked by " + ", ".join(links[1:]) + ")" if len(links) > 1 else "")

    def checkout_ref(self):
        return self.id if self.commit else self.short


def _who(data):
    """``Qwen3_5ForConditionalGeneration + DFLASH``: the model, and its drafter's algorithm."""
    model, spec = data.get("model", {}), data.get("server", {}).get("speculative_algorithm")
    return (model.get("architectures") or [model.get("kind", "a model")])[0] + (f" + {spec}" if spec else "")


def _service(data):
    gpu = data.get("gpu", {})
    return f"{_who(data)} on {gpu.get('world_size', 1)}× {gpu.get('device_name', 'a GPU')}"


def _shortfall(rep):
    """What an ``ok`` run that fails its expected figures lacks ("max_running_requests is 3, not 4")."""
    why = rep.get("judgement", "")
    return why.split("ok, but ", 1)[1].split(" (", 1)[0] if "ok, but " in why else why


def _started(rep):
    f = rep.get("figures") or {}
    parts = [f"{_num(f.get(k))} {name}" for k, name in (("max_mamba_cache_size", "Mamba slots"),
             ("max_total_num_tokens", "KV tokens"), ("max_running_requests", "running requests"))
             if f.get(k) is not None]
    return ", ".join(parts)


def _remedy_failures(ev):
    """(text, how) of each stated remedy that does not work: how is
    "satisfied" (the command already meets it) or "rerun" (applied, it fails)."""
    out = []
    for r in ev["first_bad"].get("remedies") or []:
        if r.get("works") or not r.get("parsed"):
            continue
        # looked up but not re-run: the scenario's value already meets it (harness RemedyCheck)
        how = "satisfied" if "current" in r and "rerun_outcome" not in r else "rerun"
        out.append((r["parsed"].get("source") or f"{r['parsed']['flag']} {r['parsed']['value']}", how, r))
    return out


def symptom(ev):
    """The one line: what the first bad point does that the last good did not."""
    good, bad = _sides(ev)
    fb, lg = ev["first_bad"], ev["last_good"]
    service = _service(tomllib.loads(ev["scenario"]["text"]))
    if lg.get("outcome") == Outcome.OK:
        prior = f"{good.name()} starts it ({_started(lg)})"
    elif lg.get("outcome") == Outcome.REFUSED:
        prior = f"{good.name()} refuses it too, " + (
            "stating no value to follow" if not (lg.get("remedy") or {}).get("parsed") else "with a remedy that works")
    else:
        prior = f"{good.name()} passes ({lg.get('judgement')})"
    o = fb.get("outcome")
    if o == Outcome.REFUSED:
        line = f"From {bad.name()}, SGLang refuses {service}; {prior}"
        fails = _remedy_failures(ev)
        if fails and fails[0][1] == "satisfied":
            r = fails[0][2]
            line += (f"; the refusal's hint (\"{fails[0][0]}\") is already satisfied by the refused command "
                     f"({r['parsed']['flag']} {r.get('current')})")
        elif fails:
            line += f"; following the refusal's hint (\"{fails[0][0]}\") is refused again"
        return line
    if o == Outcome.OK:
        return f"From {bad.name()}, SGLang starts {service}, but {_shortfall(fb)} and it raises no error; {prior}"
    return f"From {bad.name()}, {service}: {o} ({fb.get('reason')}); {prior}"


def title(ev):
    """The issue's title: the service, what goes wrong, since when."""
    _, bad = _sides(ev)
    who = _who(tomllib.loads(ev["scenario"]["text"]))
    fb = ev["first_bad"]
    if fb.get("outcome") == Outcome.REFUSED:
        fails = _remedy_failures(ev)
        if fails and fails[0][1] == "satisfied":
            r = fails[0][2]
            what = (f"refused at start-up although {r['parsed']['flag']} {r.get('current')} already exceeds the "
                    f"{r['parsed']['value']} its message asks for")
        elif fails:
            what = f"following the refusal's hint (\"{fails[0][0]}\") is refused again"
        else:
            what = "refused at start-up"
    elif fb.get("outcome") == Outcome.OK:
        what = _shortfall(fb) + ", without an error"
    else:
        what = f"{fb.get('outcome')} at start-up"
    return f"{who}: {what} (since {bad.short}" + (f", #{bad.prs[0]})" if bad.prs else ")")


def _sides(ev):
    v, kind, repo = ev["verdict"], RangeKind(ev["range"]["kind"]), ev["public_repo"]
    return _Point(v["last_old"], kind, repo), _Point(v["first_new"], kind, repo)


def _figures_table(lg, fb, good, bad):
    rows = [f"| | last good {good.short} | first bad {bad.short} |", "|---|---|---|",
            f"| outcome | {lg.get('outcome')} | {fb.get('outcome')} |"]
    fl, ff = lg.get("figures") or {}, fb.get("figures") or {}
    for key, name in FIGURES:
        if fl.get(key) is None and ff.get(key) is None:
            continue
        rows.append(f"| {name} (`{key}`) | {_num(fl.get(key))} | {_num(ff.get(key))} |")
    rows.append(f"| harness judgement | {_cell(lg.get('judgement'))} | {_cell(fb.get('judgement'))} |")
    return rows


def _cell(text):
    return str(text or "").replace("|", "\\|").replace("\n", " ")


def _fence(text, lang=""):
    ticks = "```" if "```" not in text else "````"
    return [ticks + lang, text.rstrip("\n"), ticks]


def _log_lines(rep):
    return [f"{r['level']:<7} {r['logger']} ({r['where']}): {r['message']}" for r in rep.get("log") or []]


def render(ev):
    """The report (Markdown); a pure function of the evidence."""
    good, bad = _sides(ev)
    rng, sc, env = ev["range"], ev["scenario"], ev["environment"]
    commits = bad.commit                       # the range's kind (RangeKind), read once in _sides
    lg, fb = ev["last_good"], ev["first_bad"]
    settings = env.get("sglang_settings") or {}
    under = assignments(settings) + " " if settings else ""   # each command runs under the same SGLANG_*
    data = tomllib.loads(sc["text"])           # in the file's order (the evidence's JSON may sort keys)
    err = fb.get("error") or {}
    lines = [f"# {title(ev)}", "",
             "> Reproduce this report on a CPU (no GPU needed; sgl-overlay runs SGLang's own sizing code):",
             f"> `{under}{ev['command']}`", "",
             "## Symptom", "", symptom(ev) + ".", "",
             "The service, as launched (the model and drafter shapes, and the GPU's memory readings, are in the "
             "scenario file below):", ""]
    lines += _fence("python -m sglang.launch_server --model-path MODEL " + " ".join(launch_flags(data.get("server", {}))),
                    "sh")
    lines += ["", "## Error message", ""]
    if err.get("message"):
        lines += [f"`{err.get('type')}` raised at `{err.get('where')}` in {bad.short}:", ""]
        lines += _fence(err["message"], "text")
    else:
        lines += [f"None: {bad.short} does not raise. The harness's judgement: {fb.get('judgement')}."]
    logged = _log_lines(fb)
    loud = [r for r in fb.get("log") or [] if r["level"] in ("WARNING", "ERROR", "CRITICAL")]
    lines += ["", f"What {bad.short} logged while sizing (SGLang's own loggers, INFO and above; "
              f"{len(loud)} at WARNING or above):", ""]
    lines += _fence("\n".join(logged) if logged else "(nothing)", "text")
    lines += ["", "## First bad and last good", "",
              "| | commit | subject | pull request |" if commits else "| | release | | |",
              "|---|---|---|---|",
              f"| first bad | {bad.link()} | {_cell(bad.label)} | {bad.pr_links()} |",
              f"| last good | {good.link()} | {_cell(good.label)} | {good.pr_links()} |", ""]
    span = f"from `{rng['old_ref']}` (good) to `{rng['new_ref']}` (bad)"
    if rng.get("merge_base"):
        span += (f"; `{rng['old_ref']}` is not an ancestor of `{rng['new_ref']}`, so the range starts at their "
                 f"merge base `{rng['merge_base'][:10]}`, tested good too")
    v = ev["verdict"]
    lines += [f"Bisected {span}: {rng['size']} {rng['kind']}, {v['executions']} test executions, both endpoints "
              f"verified first. Each step ran the scenario below on the pristine upstream tree (no patches).", ""]
    lines += ["| step | point | subject | result |", "|---|---|---|---|"]
    for s in v["steps"]:
        pid = s["point"]
        lines.append(f"| {s['phase']} | `{pid[:10] if commits else pid}` | "
                     f"{_cell(s['label'])[:90]} | {s['result']} → {s['term']} |")
    if v.get("non_monotonic"):
        lines += ["", "Note: later points behaved like the good end again: "
                  + ", ".join(f"`{p[:10]}`" for p in v["non_monotonic"]) + " (the property is not monotonic)."]
    name = f"{sc['name']}.toml"
    lines += ["", "## Reproducer", "",
              f"The scenario file (`{sc['file']}` in sgl-overlay): the GPU's memory readings, the model's "
              "and the drafter's shapes, the server flags, and what passes.", ""]
    lines += _fence(sc["text"], "toml")
    lines += ["", f"From a plain SGLang checkout (no sgl-overlay patches), on a CPU, with `{name}` saved from above "
              "and sgl-overlay installed (`pip install -e '.[harness]'` in its checkout):", ""]
    lines += _fence("\n".join([
        f"git clone {ev['public_repo']} sglang",
        f"git -C sglang checkout {bad.checkout_ref()}",
        f"{under}python tools/regress.py --tree sglang --scenario {name}    # exit 1: fails",
        f"git -C sglang checkout {good.checkout_ref()}",
        f"{under}python tools/regress.py --tree sglang --scenario {name}    # exit 0: passes"]), "sh")
    lines += ["", "`tools/regress.py` imports the tree's own sizing modules (`KVCacheConfigurator` or "
              "`ModelRunnerKVCacheMixin`, `ServerArgs` with its own flag resolution, the model's config class) and "
              "answers only the GPU probes from the scenario: free memory before and after the weights, the "
              "device's name and total memory. `--json` prints every figure and the traceback.", "",
              "## Figures on both sides of the first bad commit" if commits else
              "## Figures on both sides of the first bad release", ""]
    lines += _figures_table(lg, fb, good, bad)
    short = [side.short for side, rep in ((good, lg), (bad, fb)) if overstated(rep)]
    if short:
        lines += ["", f"Caveat: {' and '.join(short)} start the drafter before they size the KV cache "
                  f"({CITATION}), so their sizing's free-memory reading holds the drafter's weights too. "
                  "The scenario gives none (`[draft] weights_gib`), so these figures use the target's reading and "
                  "overstate the KV budget by the drafter's weights; with them, the last good side may fail as well."]
    lines += ["", "## Why the stated remedy does not work", ""]
    lines += _remedy_section(ev, bad)
    lines += ["", "## Environment", "",
              f"* SGLang: first bad {bad.link()}"
              + (f" (`{fb.get('version')}`)" if fb.get("version") else "")
              + f", last good {good.link()}" + (f" (`{lg.get('version')}`)" if lg.get("version") else "")
              + ", pristine trees (no patches)",
              f"* GPU (as the scenario reads it): {data.get('gpu', {}).get('world_size', 1)}× "
              f"{data.get('gpu', {}).get('device_name', '?')}, {_num(data.get('gpu', {}).get('total_mib'))} MiB, "
              f"free {data.get('gpu', {}).get('pre_load_free_gib')} GiB before the weights and "
              f"{data.get('gpu', {}).get('post_load_free_gib')} GiB after",
              *([f"* SGLang settings in the environment, read by the sizing as by a server: `{assignments(settings)}`"]
                if settings else []),
              f"* Python {env['python']}, torch {env['torch']}, {env['platform']}; run on a CPU",
              f"* sgl-overlay {env['tool_version']}, commit `{env['project_commit']}`"
              + (" with uncommitted changes to its tools" if env.get("project_dirty") else ""), ""]
    return "\n".join(lines)


def _remedy_section(ev, bad):
    fb = ev["first_bad"]
    if fb.get("outcome") != Outcome.REFUSED:
        return [f"{bad.short} states no remedy: it does not refuse ({fb.get('outcome')}), so nothing tells the user "
                "what changed except the log above."]
    stated = fb.get("remedies") or []
    if not stated:
        return ["The message states no flag value, so there is nothing to verify."]
    out = []
    reruns = {(r["remedy"]["key"], r["remedy"]["value"]): r["report"] for r in ev.get("remedy_reruns") or []}
    for r in stated:
        p = r["parsed"]
        out.append(f"* \"{p.get('source')}\": " + ("works: " if r.get("works") else "does not work: ")
                   + str(r.get("why")) + ".")
        again = reruns.get((p["key"], p["value"]))
        if again is not None:
            out.append(f"  Applied anyway, the harness re-ran the scenario with `{p['flag']} {p['value']}`: "
                       f"{again.get('outcome')} ({again.get('reason')}).")
    for w in ev.get("working_values") or []:
        wanted = (" and gives back " + ", ".join(f"{_num(w['goal'][k])} {name}" for k, name in FIGURES if k in w["goal"])
                  + f" (as {_sides(ev)[0].short})") if w["goal"] else ""
        if w.get("value") is None:
            out += ["", f"No `{w['flag']}` up to {w['tried_up_to']} starts it{wanted} at {bad.short} "
                    f"(at {w['tried_up_to']}: {w['at_top'].get('outcome')}: {w['at_top'].get('reason')})."]
            continue
        line = (f"The smallest `{w['flag']}` that starts it{wanted} at {bad.short}: **{w['value']:.3f}** "
                f"(the message stated {w['stated']}); with it: {_started(w['at_value'])}")
        if w.get("below"):
            b = w["below"]["report"]
            line += f"; with {w['below']['value']:.3f}: {b.get('outcome')}" + (
                f" ({_started(b)})" if b.get("outcome") == Outcome.OK else "")
        out += ["", line + ". Found by the harness, a binary search in steps of 0.001 up to 0.99."]
    return out
