"""`--report PATH`: a real, short bisection writes the bug report, and its
sections hold facts known without the code under test: the release pair,
the error text as the release's own source writes it for the scenario's
figures, the known-good figures of the incident (docs/incidents.md), the
scenario file verbatim, this machine's versions.  The text is a pure
function of the evidence (``issue.render``): rendering the evidence that
``--json`` returns gives the file again."""
import ast
import importlib.metadata
import math
import platform
import tomllib
import types

from sgl_overlay import gitcmd, release_trees
from sgl_overlay.bisect import issue
from sgl_overlay.harness import load_scenario
from tests.bisect.support import ROOT, bisect, release_history, without_drafter_weights
from tests.regress import oracle


def refusal_text(version, relpath, mfs, pre, post):
    """The ValueError message of ``_profile_available_bytes`` in the
    release's own source, evaluated for the scenario's readings (the
    f-string taken from the tree, the arithmetic done here)."""
    tree = ast.parse((release_trees.release_tree(version) / "sglang" / relpath).read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_profile_available_bytes")
    raise_ = next(n for n in ast.walk(fn) if isinstance(n, ast.Raise) and n.exc.func.id == "ValueError")
    minimum = 1 - post / pre
    names = {"self": types.SimpleNamespace(mem_fraction_static=mfs),
             "get_schedule": lambda: types.SimpleNamespace(mem_fraction_static=mfs),
             "minimum_mem_fraction_static": minimum,
             "suggested_mem_fraction_static": math.ceil(minimum * 1000) / 1000}
    return eval(compile(ast.Expression(raise_.exc.args[0]), relpath, "eval"), {}, names)


def section(text, title):
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def run_report(tmp_path, *args):
    out = tmp_path / "report.md"
    rc, data, err = bisect(*args, "--report", str(out), "--log", str(tmp_path / "log.jsonl"), "--json", "-q")
    assert rc == 0, err
    return out.read_text(), data


def test_release_report_dflash_smoke(tmp_path):
    """v0.5.16 starts the known-good DFlash service (its --mem-fraction-static raised by the
    drafter's share, dflash-smoke-raised), v0.5.17 refuses it with a hint the command already
    satisfies: the issue's first finding."""
    text, data = run_report(tmp_path, "--releases", "0.5.16..0.5.17", "--scenario", "dflash-smoke-raised")
    sc = load_scenario("dflash-smoke-raised")
    gpu, mfs = sc.gpu, sc.server["mem_fraction_static"]
    # both releases start the drafter before they size (sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855): the sizing reads
    # the target's post-load free memory less the drafter's footprint
    post = gpu["post_load_free_gib"] - sc.draft["weights_gib"]
    assert data["first_new"]["id"] == "0.5.17" and data["last_old"]["id"] == "0.5.16"

    # the command at the top writes this report again
    assert f"`python tools/bisect.py --releases 0.5.16..0.5.17 --scenario dflash-smoke-raised --report {tmp_path}/report.md`" \
        in text.split("## Symptom")[0]

    rows = section(text, "First bad and last good")
    assert "| first bad | [`v0.5.17`](https://github.com/sgl-project/sglang/releases/tag/v0.5.17) |" in rows
    # the scenario gives the drafter's footprint: no caveat that the figures overstate the budget
    assert "Caveat:" not in section(text, "Figures on both sides of the first bad release")
    assert "| last good | [`v0.5.16`](https://github.com/sgl-project/sglang/releases/tag/v0.5.16) |" in rows

    # the error, as v0.5.17's own source words it for 94.24 GiB before / 43.19 - 3.584 GiB at the sizing
    want = refusal_text("0.5.17", "srt/mem_cache/kv_cache_configurator.py", mfs, gpu["pre_load_free_gib"], post)
    assert "Raise --mem-fraction-static above 0.580" in want        # 1 - 39.606/94.24 = 0.5797
    err = section(text, "Error message")
    assert f"```text\n{want}\n```" in err
    assert "`ValueError` raised at `sglang/srt/mem_cache/kv_cache_configurator.py:" in err

    # the last good figures, re-derived by hand (tests/regress/oracle.py, docs/regress.md): 24 slots,
    # 13,398 tokens, 4 requests
    assert oracle.expect("0.5.16", "dflash-smoke-raised").figures == {
        "max_mamba_cache_size": 24, "max_total_num_tokens": 13398, "max_running_requests": 4}
    figs = section(text, "Figures on both sides of the first bad release")
    assert "| KV cache tokens (`max_total_num_tokens`) | 13,398 | — |" in figs
    assert "| running requests (`max_running_requests`) | 4 | — |" in figs
    assert "| Mamba state slots (`max_mamba_cache_size`) | 24 | — |" in figs
    assert "| outcome | ok | refused |" in figs

    # the remedy: already satisfied by the command, and applied it is refused again
    remedy = section(text, "Why the stated remedy does not work")
    assert f"already satisfied: mem_fraction_static is {mfs}" in remedy
    again = refusal_text("0.5.17", "srt/mem_cache/kv_cache_configurator.py", 0.58, gpu["pre_load_free_gib"], post)
    assert "Applied anyway, the harness re-ran the scenario with `--mem-fraction-static 0.58`: refused" in remedy
    assert again in remedy
    # what does work, searched by the harness: above the command's own value (refused), and the
    # value that gives back the last good figures gives at least 24 / 13,398 / 4
    first, restore = data["report"]["evidence"]["working_values"]
    assert first["value"] > mfs and first["at_value"]["outcome"] == "ok" and first["below"]["report"]["outcome"] != "ok"
    assert restore["goal"] == {"max_total_num_tokens": 13398, "max_running_requests": 4, "max_mamba_cache_size": 24}
    got = restore["at_value"]["figures"]
    assert got["max_total_num_tokens"] >= 13398 and got["max_running_requests"] >= 4 and got["max_mamba_cache_size"] >= 24
    assert f"that starts it at v0.5.17: **{first['value']:.3f}** (the message stated 0.58)" in remedy

    # the scenario file, verbatim and parseable, and the checkout commands
    repro = section(text, "Reproducer")
    inline = repro.split("```toml\n", 1)[1].split("\n```", 1)[0]
    assert inline + "\n" == sc.path.read_text() and tomllib.loads(inline)["name"] == "dflash-smoke-raised"
    assert "git -C sglang checkout v0.5.17\npython tools/regress.py --tree sglang --scenario dflash-smoke-raised.toml" in repro

    env = section(text, "Environment")
    head = gitcmd.out(ROOT, "rev-parse", "HEAD")
    assert f"Python {platform.python_version()}, torch {importlib.metadata.version('torch')}" in env
    assert f"commit `{head}`" in env

    # the text is a pure function of the evidence
    assert issue.render(data["report"]["evidence"]) == text

    # no SGLANG_* here (tests/conftest.py); under one, every command is written under it too
    ev = data["report"]["evidence"]
    assert ev["environment"]["sglang_settings"] == {} and "SGLang settings" not in env
    ev = {**ev, "environment": {**ev["environment"], "sglang_settings": {"SGLANG_MAMBA_CONV_DTYPE": "float32"}}}
    under = issue.render(ev)
    assert f"`SGLANG_MAMBA_CONV_DTYPE=float32 python tools/bisect.py --releases 0.5.16..0.5.17 " in under
    assert "SGLANG_MAMBA_CONV_DTYPE=float32 python tools/regress.py --tree sglang --scenario dflash-smoke-raised.toml" \
        in section(under, "Reproducer")
    assert "`SGLANG_MAMBA_CONV_DTYPE=float32`" in section(under, "Environment")


def test_release_report_says_when_the_scenario_lacks_the_drafters_footprint(tmp_path):
    """dflash-smoke without [draft] weights_gib: v0.5.16 starts it on the target's reading and
    v0.5.17 refuses it; both start the drafter before they size the KV cache, so the report says
    that its figures use the target's reading (and overstate the budget)."""
    scenario = without_drafter_weights("dflash-smoke", tmp_path / "sc")
    text, data = run_report(tmp_path, "--releases", "0.5.16..0.5.17", "--scenario", str(scenario))
    assert data["first_new"]["id"] == "0.5.17" and data["last_old"]["id"] == "0.5.16"
    caveat = section(text, "Figures on both sides of the first bad release")
    assert "Caveat: v0.5.16 and v0.5.17 start the drafter before they size the KV cache" in caveat
    assert "sgl-project/sglang#23862" in caveat


def test_commit_report_hint_that_fails_when_applied(tmp_path):
    """A commit range (a repository of release trees): v0.5.14 names a
    --mem-fraction-static value that, applied, is refused with the same
    value again; v0.5.13 states none.  The second finding."""
    repo = release_history(["0.5.13", "0.5.14"])
    text, data = run_report(tmp_path, "--repo", str(repo), "--good", "v0.5.13", "--bad", "v0.5.14",
                            "--scenario", "hint-excludes-mamba")
    bad = gitcmd.out(repo, "rev-parse", "v0.5.14^{commit}")
    good = gitcmd.out(repo, "rev-parse", "v0.5.13^{commit}")
    rows = section(text, "First bad and last good")
    assert f"| first bad | [`{bad[:10]}`](https://github.com/sgl-project/sglang/commit/{bad}) | sglang 0.5.14 | — |" in rows
    assert f"| last good | [`{good[:10]}`](https://github.com/sgl-project/sglang/commit/{good}) | sglang 0.5.13 | — |" in rows
    assert str(repo) not in text                 # the clone read is never cited; the public repository is

    sc = load_scenario("hint-excludes-mamba")
    # v0.5.14 starts the drafter before it sizes (sgl-project/sglang#23862, v0.5.14; the message naming the drafter is #28855): its reading is the
    # target's post-load one less the drafter's footprint, 43.19 - 3.584 GiB
    pre, post = sc.gpu["pre_load_free_gib"], sc.gpu["post_load_free_gib"] - sc.draft["weights_gib"]
    rel = "srt/model_executor/model_runner_kv_cache_mixin.py"
    assert f"```text\n{refusal_text('0.5.14', rel, 0.5, pre, post)}\n```" in section(text, "Error message")
    remedy = section(text, "Why the stated remedy does not work")
    # 1 - 39.606/94.24 = 0.5797 -> 0.580; at 0.58: 39.606 - 94.24 x 0.42 = 0.025 GiB, less than the Mamba state
    assert "does not work: re-run with --mem-fraction-static 0.580: refused" in remedy
    assert refusal_text("0.5.14", rel, 0.58, pre, post) in remedy
    assert f"git -C sglang checkout {bad}\n" in section(text, "Reproducer")


def test_release_report_request_count_lowered(tmp_path):
    """v0.5.13 starts max-running-lowered with fewer running requests than
    the 4 asked for, saying so only at INFO (the log line of v0.5.13's
    _resolve_max_num_reqs); v0.5.12.post1 runs the 4.  The third finding."""
    text, data = run_report(tmp_path, "--releases", "0.5.12.post1..0.5.13", "--scenario", "max-running-lowered")
    fb = data["report"]["evidence"]["first_bad"]
    got = fb["figures"]["max_running_requests"]
    assert fb["outcome"] == "ok" and 0 < got < 4
    figs = section(text, "Figures on both sides of the first bad release")
    assert f"| running requests (`max_running_requests`) | 4 | {got} |" in figs
    assert "--max-running-requests given (`max_running_requests_flag`) | 4 | 4 |" in figs
    # the only trace: v0.5.13's INFO line, worded as its source words it
    src = (release_trees.release_tree("0.5.13") / "sglang/srt/model_executor/model_runner_kv_cache_mixin.py").read_text()
    assert 'f"Max concurrent requests (per dp worker) from the finalized token capacity: "' in src
    err = section(text, "Error message")
    assert "None: v0.5.13 does not raise." in err
    said = [line for line in err.splitlines() if "max_num_reqs" in line]
    call = src[:src.index("Max concurrent requests")].count("\n")    # 1-based: the `logger.info(` line above it
    assert src.splitlines()[call - 1].strip() == "logger.info("
    assert said == [f"INFO    sglang.srt.model_executor.model_runner_kv_cache_mixin (sglang/srt/model_executor/"
                    f"model_runner_kv_cache_mixin.py:{call}): "
                    f"Max concurrent requests (per dp worker) from the finalized token capacity: max_num_reqs={got}."]
    assert "it does not refuse (ok)" in section(text, "Why the stated remedy does not work")


def test_no_report_for_another_verdict(tmp_path):
    """not-in-range (v0.5.9 already fails negative-rest-tp8): no file, the
    verdict's exit code, and the reason on stderr."""
    out = tmp_path / "report.md"
    rc, data, err = bisect("--releases", "0.5.9..0.5.10", "--scenario", "negative-rest-tp8", "--report", str(out),
                           "--log", str(tmp_path / "log.jsonl"), "--json", "-q")
    assert rc == 4 and not out.exists()
    assert data["report"]["path"] is None and "the verdict is not-in-range" in err


def test_pull_request_numbers_from_upstream_subjects():
    """Subjects as they are in upstream's history: a squash merge, and a
    cherry-pick onto a release branch (original first)."""
    assert issue.pull_requests("[Fix] Reserve the mamba pool's +1 padding slot in the memory budget solve "
                               "(#32184)") == ["32184"]
    assert issue.pull_requests("[Cherry-pick to release/v0.5.17] fix(PP): size the mamba pool per pipeline stage, "
                               "not per whole model (#33666) (#34035)") == ["33666", "34035"]
    assert issue.pull_requests("sglang 0.5.14") == []
