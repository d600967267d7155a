"""A request grammar with no continuation (a regex / EBNF whose language is empty, or one that
dead-ends after some text): every logit is masked, so whatever the sampler picks is a token the
grammar forbids. SGLang's scheduler aborts such a request ("Grammar accept_token failed"); before
this fix sglang-v4 kept the forbidden token (id 0, the BOS) and went on emitting it until
``max_new_tokens``, a ``length`` finish with output the grammar never allowed. Now a grammar
that allows no first token is refused at intake (400 naming the field, before any page is
taken), and one that dead-ends later is aborted there with a 400 naming the field.

In-process ``Scheduler`` on the random test checkpoint. Oracles: xgrammar's own matcher, built
here independently of the code under test (it accepts no string for the dead grammars, and
accepts the text the live request produced), and the pool's counters after a flush (no pages
leaked). The request next to the dead one runs to its ``max_new_tokens`` as a ``length`` finish.
"""

from __future__ import annotations

import pytest
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.io_struct import finish_length

xgr = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402

DEAD = [("regex", "[^\\s\\S]"), ("regex", "a[^\\s\\S]"), ("ebnf", 'root ::= "b" [^\\u0000-\\U0010FFFF]')]


def _oracle_grammar(kind: str, spec: str) -> object:
    return xgr.Grammar.from_regex(spec) if kind == "regex" else xgr.Grammar.from_ebnf(spec)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):
    s = make_scheduler(sched_model_dir)
    if not s.grammar_enabled:
        pytest.skip("no grammar backend")
    return s


@pytest.mark.parametrize("kind,spec", DEAD)
def test_dead_end_grammar_aborts_with_400_and_leaks_nothing(sched, kind: str, spec: str) -> None:
    g = _oracle_grammar(kind, spec)
    for text in ("", "a", "b", "ab", "a b", "\x00"):
        assert not _is_grammar_accept_string(g, text), (spec, text)  # the language is empty

    submit(sched, "dead", [11, 12, 13, 14], 6, sampling={kind: spec})
    submit(sched, "live", [11, 12, 13, 14], 6, sampling={"regex": "[a-z]{2,12}"})
    res = drain(sched)

    dead = res["dead"]["finish"]
    assert dead["type"] == "abort", dead  # old code: {"type": "length", "length": 6}, ids [0] * 6
    assert dead["status_code"] == 400 and dead["message"].startswith(f"{kind}:"), dead
    assert len(res["dead"]["ids"]) <= 2  # stopped at the dead end, not run to max_new_tokens

    live = res["live"]
    assert live["finish"] == finish_length(6)
    text = sched.tokenizer.decode(live["ids"], skip_special_tokens=True)
    assert _is_grammar_accept_string(xgr.Grammar.from_regex("[a-z]{0,12}"), text), text
    assert_idle(sched)


@pytest.fixture(scope="module")
def hf_tok(sched_model_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(sched_model_dir)


def _oracle_first_tokens(hf_tok, vocab: int, regex: str) -> set[int]:
    """The tokens xgrammar's own matcher allows first for ``regex`` (over transformers' tokenizer
    of the model directory and the model's vocabulary), built here without the code under test."""
    info = xgr.TokenizerInfo.from_huggingface(hf_tok, vocab_size=vocab)
    matcher = xgr.GrammarMatcher(xgr.GrammarCompiler(info).compile_regex(regex))
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    matcher.fill_next_token_bitmask(bitmask, 0)
    return {t for t in range(vocab) if (int(bitmask[0, t // 32]) >> (t % 32)) & 1}


def test_allowlist_or_bad_words_outside_the_grammar_abort_with_400_naming_them(sched, hf_tok) -> None:
    """``allowed_token_ids`` (or bad words) that leave none of the tokens the request's grammar
    allows mask every logit, as a dead grammar does: the sampled token is one the grammar forbids.
    Before this fix that was SGLang's 500 "Grammar accept_token failed" (an engine fault) for a
    request that only asked for two incompatible things; now it is a 400 naming the field that
    left nothing. A request whose allowlist meets the grammar runs within both and, its match
    complete, ends with the grammar's stop token although the allowlist lacks it (it met the same
    dead row there: the grammar allowed only EOS)."""
    vocab = sched.model_config.vocab_size
    digits = _oracle_first_tokens(hf_tok, vocab, "[0-9]{3}")
    words = [t for t in range(vocab) if hf_tok.decode([t]).strip().isalpha()][:8]
    assert len(words) == 8 and not digits & set(words)  # the allowlist shares no token with the grammar
    a_tokens = _oracle_first_tokens(hf_tok, vocab, "a")
    assert a_tokens
    one_digit = sorted(digits)[:3]

    submit(sched, "allow", [11, 12, 13], 6, sampling={"regex": "[0-9]{3}", "allowed_token_ids": words})
    submit(sched, "ban", [11, 12, 13], 6, sampling={"regex": "a", "bad_words_ids": [[t] for t in a_tokens]})
    submit(
        sched, "live", [11, 12, 13], 6, sampling={"regex": "[0-9]{3}", "allowed_token_ids": one_digit + words}
    )
    res = drain(sched)

    for rid, field in (("allow", "allowed_token_ids"), ("ban", "bad_words_ids")):
        fin = res[rid]["finish"]
        assert fin["type"] == "abort", fin
        # old code: status_code 500, "Grammar accept_token failed: regex rejected token 0."
        assert fin["status_code"] == 400 and fin["message"].startswith(f"{field}:"), fin
    live = res["live"]
    assert live["finish"]["type"] == "stop", live["finish"]  # old code: the 500 abort after 3 digits
    assert set(live["ids"]) - set(sched.eos_ids) <= set(one_digit), live["ids"]
    text = hf_tok.decode(live["ids"], skip_special_tokens=True)
    assert _is_grammar_accept_string(xgr.Grammar.from_regex("[0-9]{3}"), text), text
    assert_idle(sched)
