"""SGLang's ``X-Data-Parallel-Rank`` request header on a single server (one rank: rank 0).

SGLang's OpenAI serving reads the header on its generation routes (``extract_routed_dp_rank_from_
header``): it overrides the body's ``routed_dp_rank``, a value that is not an integer is a 400
("Invalid X-Data-Parallel-Rank header: must be an integer"), and the rank is checked as the body's
is (a single server is ``dp_size`` 1). Oracles: those stated rules, the ``openai`` client's own
parse of the answers, and the fake engine's record of what reached it (nothing, for a 400).
"""

from __future__ import annotations

import openai
import pytest
from fake_prompt_tm import MODEL, PromptTM
from responses_testutil import make_client
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

MSGS = [{"role": "user", "content": "hi"}]


def test_header_pins_rank_zero_and_refuses_others(tok: PreTrainedTokenizerFast) -> None:
    tm = PromptTM(tok)
    client, tc = make_client(tm)
    calls = (
        lambda h, **kw: client.chat.completions.create(model=MODEL, messages=MSGS, extra_headers=h, **kw),
        lambda h, **kw: client.completions.create(model=MODEL, prompt=[1, 2, 3], extra_headers=h, **kw),
        lambda h, **kw: client.responses.create(model=MODEL, input="hi", extra_headers=h, **kw),
    )
    for call in calls:
        for name in ("X-Data-Parallel-Rank", "x-data-parallel-rank"):
            call({name: "0"})  # served
        n = len(tm.received)
        for bad, words in (
            ("1", "less than dp_size: 1"),
            ("-1", "non-negative"),
            ("zero", "Invalid X-Data-Parallel-Rank header: must be an integer"),
        ):
            with pytest.raises(openai.BadRequestError) as ei:
                call({"X-Data-Parallel-Rank": bad})
            assert words in ei.value.message and "X-Data-Parallel-Rank" in ei.value.message
        assert len(tm.received) == n  # nothing reached the engine
    # the header overrides the body's pin (SGLang's precedence): body 1 alone is a 400, with 0 served
    for field in ("routed_dp_rank", "data_parallel_rank"):
        with pytest.raises(openai.BadRequestError):
            calls[0]({}, extra_body={field: 1})
        calls[0]({"X-Data-Parallel-Rank": "0"}, extra_body={field: 1})
    # not a generation route: the header is not read there (as in SGLang)
    r = tc.post("/v1/tokenize", json={"model": MODEL, "prompt": "hi"}, headers={"X-Data-Parallel-Rank": "5"})
    assert r.status_code == 200, r.text
