"""The speculative-value check's prompt set (tools/gpu/spec_prompts.py): questions from this
interpreter's own standard-library docstrings, split by module, no module on both sides."""
import pytest

from tests.gpu.spec_script import prompts


def test_questions_quote_the_real_docstrings():
    qs = {q.name: q for q in prompts.questions(("json", "textwrap"))}
    import json as j, textwrap
    assert "json.dumps" in qs and "textwrap.dedent" in qs
    assert prompts.first_sentence(j.dumps.__doc__) in qs["json.dumps"].text
    assert prompts.first_sentence(textwrap.dedent.__doc__) in qs["textwrap.dedent"].text
    # only names whose __module__ is of the module's own top-level package
    assert all(q.module in ("json", "textwrap") for q in qs.values())


def test_first_sentence():
    assert prompts.first_sentence("Return x.  More.\n\nDetails.") == "Return x."
    assert prompts.first_sentence("  Spread\n   over lines. Then more") == "Spread over lines."
    assert prompts.first_sentence(None) == "" and len(prompts.first_sentence("a" * 500)) == 240


def test_sets_are_disjoint_by_module_and_fixed():
    train, ev = prompts.prompt_sets(64, 3000)
    assert len(ev) == 64 and len(train) == 3000
    assert not {q.module for q in train} & {q.module for q in ev}
    assert all(prompts.is_eval_module(q.module) for q in ev)
    assert len({q.text for q in ev}) == 64 and len({q.text for q in train}) == 3000
    again_train, again_ev = prompts.prompt_sets(64, 3000)
    assert [q.text for q in again_ev] == [q.text for q in ev] and again_train[:50] == train[:50]
    # training questions use every template of a callable; evaluation one
    per = {}
    for q in train:
        per.setdefault(q.name, set()).add(q.text)
    assert max(len(v) for v in per.values()) == len(prompts.TEMPLATES)


def test_too_few_held_out_questions_is_a_clear_error():
    with pytest.raises(ValueError, match="held-out questions for 100000 evaluation prompts"):
        prompts.split(prompts.questions(("json",)), 100000, 10)


def test_held_out_covers_submodules_and_underscore_twins():
    assert prompts.is_eval_module("json") and prompts.held_out("json")
    assert prompts.held_out("json.decoder") and prompts.held_out("_json") and prompts.held_out("_pickle")
    assert prompts.held_out("textwrap") and prompts.held_out("textwrap.anything")      # textwrap hashes to eval
    assert not prompts.held_out("fractions") and not prompts.held_out("calendar")


def test_corpus_questions_quote_docstrings_and_source_of_trained_modules_only():
    import textwrap
    qs = prompts.corpus_questions(["textwrap", "json", "json.decoder", "colorsys", "fractions"])
    mods = {q.module for q in qs}
    assert mods == {"colorsys", "fractions"}
    texts = [q.text for q in qs if q.name == "colorsys.rgb_to_hsv"]
    src = prompts.source_of(__import__("colorsys").rgb_to_hsv)
    assert src.startswith("def rgb_to_hsv") and any(src in t for t in texts)       # the source, quoted
    assert len(texts) == len(prompts.TEMPLATES) * bool(prompts.first_sentence(__import__("colorsys").rgb_to_hsv.__doc__)) \
        + len(prompts.SOURCE_TEMPLATES)
    # methods of the modules' classes too
    assert any(q.name == "fractions.Fraction.limit_denominator" for q in qs)
    assert len({q.text for q in qs}) == len(qs)


def test_corpus_sets_keep_the_benchmarks_evaluation_prompts():
    train, ev = prompts.corpus_sets(64, modules=["colorsys", "json"])
    _, ev0 = prompts.prompt_sets(64, 0)
    assert [q.text for q in ev] == [q.text for q in ev0]
    assert not {q.module for q in train} & {q.module for q in ev}
