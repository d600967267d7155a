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
