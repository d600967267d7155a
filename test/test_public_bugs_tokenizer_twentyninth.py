"""A twenty-ninth set of public bug reports on tokenization: ``/detokenize`` honouring the
request's ``skip_special_tokens`` (also for a single special id), ``/tokenize`` with
``add_special_tokens`` adding no end-of-sentence token, and a prompt that already spells the
begin-of-sentence token keeping exactly one BOS on ``/tokenize`` and on the completion route.

Every report passed as-is; the tests are regression guards.

Fixture: the OpenAI routes in process over ``openai_fake_tm.FakeTM`` (``tokenize``/``detokenize``
routes and ``/v1/completions`` usage). Oracles: the DeepSeek-V4 tokenizer loaded by
``transformers`` on its own (``tok``: ``encode``, ``decode`` with and without
``skip_special_tokens``, the special ids) and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client

MODEL = "dsv4-test"  # app_client's served name
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"


def _post(tok: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` (with the served model name) to ``path``; asserts 200, returns the JSON."""
    r = app_client(FakeTM(tok)).post(path, json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("path", ["/detokenize", "/v1/detokenize"])
@pytest.mark.parametrize("skip", [True, False])
def test_tt_inference_server_2148_detokenize_honours_skip_special_tokens(
    tok: Any, path: str, skip: bool
) -> None:
    """tenstorrent/tt-inference-server#2148 and #2570: special tokens were always skipped (or
    always kept) when ids were turned back into text, whatever the request asked. Expected (the
    fix: the request's ``skip_special_tokens`` decides, default true): ``/detokenize`` of ids with
    BOS and an EOS between two words gives ``transformers``' ``decode`` with the same flag, so the
    EOS text is there with the flag off and absent with it on."""
    ids = [tok.convert_tokens_to_ids(BOS)] + tok.encode("hi", add_special_tokens=False)
    ids += [tok.convert_tokens_to_ids(EOS)] + tok.encode(" there", add_special_tokens=False)
    text = _post(tok, path, {"tokens": ids, "skip_special_tokens": skip})["text"]
    assert text == tok.decode(ids, skip_special_tokens=skip)
    assert (EOS in text) is (not skip) and (BOS in text) is (not skip)


def test_tt_inference_server_2148_detokenize_default_skips_special_tokens(tok: Any) -> None:
    """tenstorrent/tt-inference-server#2570: ``skip_special_tokens`` defaults to true, as in
    SGLang's and vLLM's sampling parameters. Expected: without the field the EOS text is dropped."""
    ids = tok.encode("a", add_special_tokens=False) + [tok.convert_tokens_to_ids(EOS)]
    assert (
        _post(tok, "/detokenize", {"tokens": ids})["text"] == tok.decode(ids, skip_special_tokens=True) == "a"
    )


@pytest.mark.parametrize("special", [BOS, EOS])
def test_vllm_1044_single_special_id_is_skipped(tok: Any, special: str) -> None:
    """vllm-project/vllm#1044: ``skip_special_tokens`` was not respected when the ids to convert
    were a single id rather than a list, so a lone special token came out as text. Expected: a
    one-id ``/detokenize`` of a special token gives the empty text with the flag on and the
    token's own text with it off (``transformers``' ``decode``)."""
    sid = tok.convert_tokens_to_ids(special)
    assert _post(tok, "/detokenize", {"tokens": [sid], "skip_special_tokens": True})["text"] == ""
    off = _post(tok, "/detokenize", {"tokens": [sid], "skip_special_tokens": False})["text"]
    assert off == tok.decode([sid], skip_special_tokens=False) == special


@pytest.mark.parametrize("prompt", ["the dog walked", ["one", "two words"]])
def test_transformers_22935_add_special_tokens_appends_no_eos(tok: Any, prompt: str | list[str]) -> None:
    """huggingface/transformers#22935 and ggml-org/llama.cpp#10129 (its review: "why would anybody
    want to add an EOS to a prompt?"): ``add_special_tokens`` is expected to add what the
    tokenizer's post-processor adds to a prompt, never an end-of-sentence token. Expected:
    ``/tokenize`` with ``add_special_tokens`` true gives ``transformers``' ``encode`` ids and no
    EOS id, for a single prompt and for each prompt of a batch."""
    got = _post(tok, "/tokenize", {"prompt": prompt, "add_special_tokens": True})["tokens"]
    prompts = [prompt] if isinstance(prompt, str) else prompt
    rows = [got] if isinstance(prompt, str) else got
    eos = tok.convert_tokens_to_ids(EOS)
    for p, row in zip(prompts, rows, strict=True):
        assert row == tok.encode(p, add_special_tokens=True)
        assert eos not in row


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_llama_cpp_10129_prompt_spelling_bos_keeps_one_bos(tok: Any, add_special_tokens: bool) -> None:
    """ggml-org/llama.cpp#10129: a BOS was added on every tokenize call, so a prompt that already
    began with the begin-of-sentence token got it twice. Expected: ``/tokenize`` of a prompt that
    spells BOS at its start holds exactly one BOS id, first, whatever ``add_special_tokens`` says,
    and the completion route counts the same number of prompt tokens."""
    prompt = f"{BOS}hello world"
    ids = _post(tok, "/tokenize", {"prompt": prompt, "add_special_tokens": add_special_tokens})["tokens"]
    bos = tok.convert_tokens_to_ids(BOS)
    assert ids.count(bos) == 1 and ids[0] == bos
    assert ids == [bos] + tok.encode("hello world", add_special_tokens=False)
    usage = _post(tok, "/v1/completions", {"prompt": prompt, "max_tokens": 1})["usage"]
    assert usage["prompt_tokens"] == len(ids)
