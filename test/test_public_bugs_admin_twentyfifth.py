"""A twenty-fifth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route (prompts as token arrays and batches of them, echo with token prompts, echo + logprobs,
``n`` over a batch, ``stream_options``), ``/v1/models``, the ``/v1/embeddings`` refusal, the
admin routes (``/abort_request``, ``/get_server_info``, ``/get_model_info``, ``/health``,
``/metrics``) and the ``launch_server`` command line. Each test names its report.

Fault found here and fixed: ``--served-model-name`` takes one or more names (vLLM's form), so
``--served-model-name ASR /models/My-Model`` with no ``--model-path`` made the model directory a
second served name and served the embedded default model under both names, with no word said
(vLLM's report of the same shape: the flag swallowed the positional model). The command line is
now refused (exit code 2, one line naming ``--model-path``) when a later served name is an
existing directory and ``--model-path`` is not set.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer
manager and detokenizer, served as ``qa-model``: the fake model writes ``FAKE_TEXT``'s tokens,
fake logprobs), ``tok`` (the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own), the
in-process app of ``admin_app_testutil`` and ``TokenizerMetrics`` rendered in-process. Oracles: the
``openai`` client's own types and errors, the tokenizer, ``prometheus_client``'s text parser, the
values a test feeds the metrics, SGLang's documented ``/abort_request`` body and health states,
and the reports' stated expected values.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from admin_app_testutil import admin_app_client
from public_bugs_testutil import post
from server_fixture import REPO, ServerHandle, fake_output_text

openai = pytest.importorskip("openai")

COMPLETIONS = "/v1/completions"
MODEL = "qa-model"  # plain_fake_server's served name


def _client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _completion(server: ServerHandle, body: dict[str, Any]) -> Any:
    """``completions.create(model=MODEL, **body)`` through the ``openai`` client: its own request
    and its own reading of the answer (a ``Completion``)."""
    return _client(server).completions.create(model=MODEL, **body)


def _stream(server: ServerHandle, body: dict[str, Any]) -> list[Any]:
    """The chunks of ``completions.create(model=MODEL, stream=True, **body)``, each read by the
    ``openai`` client into its ``Completion`` type."""
    return list(_client(server).completions.create(model=MODEL, stream=True, **body))


def _counts(usage: Any) -> tuple[int, int, int]:
    """``(prompt_tokens, completion_tokens, total_tokens)`` of a usage object."""
    return (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)


def _ids(tok: Any, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------- /v1/completions


def test_sglang_736_prompt_as_token_arrays_and_batches_of_them(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#736: OpenAI's ``prompt`` is "a string, array of strings, array of
    tokens, or array of token arrays"; the route took strings only. Expected: one token array is
    the same request as the text it encodes (same text, same usage), and an array of two token
    arrays answers two choices (indexes 0 and 1) whose ``prompt_tokens`` add up the two arrays'
    lengths."""
    a, b = _ids(tok, "The capital of France is"), _ids(tok, "One plus one equals")
    as_text = _completion(plain_fake_server, {"prompt": "The capital of France is", "max_tokens": 3})
    as_ids = _completion(plain_fake_server, {"prompt": a, "max_tokens": 3})
    assert as_ids.choices[0].text == as_text.choices[0].text == fake_output_text(tok, 3)
    assert as_ids.usage == as_text.usage and as_ids.usage.prompt_tokens == len(a)
    batch = _completion(plain_fake_server, {"prompt": [a, b], "max_tokens": 3})
    assert [c.index for c in batch.choices] == [0, 1]
    assert batch.usage.prompt_tokens == len(a) + len(b)
    assert batch.usage.completion_tokens == 6


def test_vllm_3441_echo_with_a_token_prompt_echoes_its_decoded_text(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#3441 (fixing #2703): ``echo`` with a prompt of token ids failed (there was
    no prompt text to echo). Expected: the choice's text is the tokenizer's decoding of the ids
    followed by the generated text, and with ``logprobs`` the first ``len(ids)`` tokens are the
    prompt's own tokens (the first with a ``null`` logprob)."""
    ids = _ids(tok, "Hello there, how are you")
    out = _completion(plain_fake_server, {"prompt": ids, "max_tokens": 2, "echo": True, "logprobs": 1})
    ch = out.choices[0]
    assert ch.text == tok.decode(ids) + fake_output_text(tok, 2)
    assert ch.logprobs.tokens[: len(ids)] == [tok.decode([i]) for i in ids]
    assert ch.logprobs.token_logprobs[0] is None
    assert len(ch.logprobs.tokens) == len(ids) + 2


def test_vllm_metal_680_echo_logprobs_each_top_dict_holds_its_own_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm-metal#680: ``echo`` + ``logprobs: N`` answered 500 (``KeyError``: the
    position's own token was missing from its top-logprob dict). Expected (OpenAI's meaning of
    ``logprobs``): 200; after the first prompt token, each position's ``top_logprobs`` dict holds
    that position's token with the logprob in ``token_logprobs`` and at most ``N + 1`` entries
    (the N best plus the token itself)."""
    n = 2
    prompt = "The three most important properties of a cache are"
    out = _completion(plain_fake_server, {"prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": n})
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(_ids(tok, prompt)) + 3
    assert lp.top_logprobs[0] is None and lp.token_logprobs[0] is None
    for tok_text, value, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:], strict=True):
        assert tok_text in top, (tok_text, top)
        assert top[tok_text] == pytest.approx(value)
        assert 1 <= len(top) <= n + 1


def test_sglang_910_n_over_a_batch_answers_n_choices_per_prompt(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#910: ``n > 1`` with a list input answered 500. Expected (OpenAI / vLLM):
    ``n`` choices for each prompt, indexes ``0 .. n * len(prompts) - 1`` with prompt ``i``'s at
    ``i * n .. i * n + n - 1`` (each echoes its own prompt here), and ``prompt_tokens`` counted
    once per prompt, not once per choice."""
    prompts = ["alpha beta", "gamma delta epsilon"]
    out = _completion(plain_fake_server, {"prompt": prompts, "n": 2, "max_tokens": 2, "echo": True})
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    by_index = {c.index: c.text for c in out.choices}
    for i, p in enumerate(prompts):
        for j in range(2):
            assert by_index[i * 2 + j] == p + fake_output_text(tok, 2)
    assert out.usage.prompt_tokens == sum(len(_ids(tok, p)) for p in prompts)
    assert out.usage.completion_tokens == 8


def test_vllm_5742_include_usage_and_continuous_usage_stats(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#5742: ``stream_options.continuous_usage_stats`` puts the usage so far on
    every streamed chunk, ``include_usage`` alone only on a last chunk with no choices. Expected
    (each chunk read by the ``openai`` client's ``Completion`` type): with ``include_usage`` alone
    the text chunks carry no usage and the last chunk carries the totals; with both, every text
    chunk carries ``prompt_tokens`` of the prompt, ``completion_tokens`` that never go down and
    ``total_tokens`` their sum, and the last chunk's totals equal the non-streamed usage."""
    body = {"prompt": "Count with me", "max_tokens": 4}
    plain = _counts(_completion(plain_fake_server, body).usage)
    assert plain[0] == len(_ids(tok, "Count with me"))
    only = _stream(plain_fake_server, {**body, "stream_options": {"include_usage": True}})
    assert all(c.usage is None for c in only[:-1] if c.choices)
    assert only[-1].choices == [] and _counts(only[-1].usage) == plain
    both = _stream(
        plain_fake_server, {**body, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    )
    text_chunks = [c for c in both if c.choices]
    assert "".join(c.choices[0].text for c in text_chunks) == fake_output_text(tok, 4)
    seen = 0
    for c in text_chunks:
        assert c.usage is not None and c.usage.prompt_tokens == plain[0]
        assert c.usage.completion_tokens >= seen
        assert c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
        seen = c.usage.completion_tokens
    assert seen == 4 and both[-1].choices == [] and _counts(both[-1].usage) == plain


def test_vllm_21704_embeddings_on_a_generation_model_is_an_error(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#21704: ``/v1/embeddings`` on a generation-only model answered 200.
    Expected: the ``openai`` client's ``embeddings.create`` raises its ``BadRequestError``
    (HTTP 400) with an OpenAI error body, and the server then still completes."""
    with pytest.raises(openai.BadRequestError) as e:
        _client(plain_fake_server).embeddings.create(model=MODEL, input="hello")
    assert e.value.status_code == 400
    assert isinstance(e.value.body, dict) and e.value.message
    assert _completion(plain_fake_server, {"prompt": "still up", "max_tokens": 1}).choices


# --------------------------------------------------------------------------- models, admin routes


def test_sglang_12977_models_and_server_info_name_the_served_model(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#12977: with ``--served-model-name deepseek`` the model list showed the
    model path, since ``/get_server_info`` gave the router no served name. Expected: the
    ``openai`` client's ``models.list()`` gives exactly the served name, ``models.retrieve`` of it
    answers it, and ``/get_server_info`` and ``/get_model_info`` both report
    ``served_model_name`` as the flag's value."""
    client = _client(plain_fake_server)
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    info = requests.get(plain_fake_server.url + "/get_server_info", timeout=30).json()
    assert info["served_model_name"] == MODEL
    model_info = requests.get(plain_fake_server.url + "/get_model_info", timeout=30).json()
    assert model_info["served_model_name"] == MODEL and model_info["is_generation"] is True


def test_sglang_749_several_served_names_first_is_reported_all_are_listed(tmp_path: Path) -> None:
    """sgl-project/sglang#749 (review): ``--served-model-name`` given as a list must not leave the
    served name unset; the first name is the one reported. Expected: with the names
    ``ADMIN_NAMES``, the ``openai`` client's reading of ``/v1/models`` lists every name (the first
    first), ``/v1/models/{name}`` answers each, an unknown name is a 404 ``NotFoundError`` shape,
    and ``/get_model_info`` reports the first name."""
    from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES

    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with admin_app_client(tmp_path) as (client, _tm):
        listed = openai.types.Model  # the client's type for each entry
        models = client.get("/v1/models", headers=auth)
        assert models.status_code == 200, models.text
        ids = [listed.model_validate(m).id for m in models.json()["data"]]
        assert ids == ADMIN_NAMES
        for name in ADMIN_NAMES:
            one = client.get(f"/v1/models/{name}", headers=auth)
            assert one.status_code == 200 and listed.model_validate(one.json()).id == name
        missing = client.get("/v1/models/not-served", headers=auth)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == 404
        info = client.get("/get_model_info", headers=auth)
        assert info.status_code == 200 and info.json()["served_model_name"] == ADMIN_NAMES[0]


def test_slime_63_abort_request_with_abort_all_and_no_rid(plain_fake_server: ServerHandle) -> None:
    """THUDM/slime#63: ``/abort_request`` answered 422 to a body without ``rid``. SGLang's
    ``AbortReq`` has ``rid`` default ``""`` and an ``abort_all`` switch, so ``{"abort_all": true}``
    is a whole request. Expected: 200 for it, a 4xx (never 5xx) for a ``rid`` that is not a
    string, and the server completes afterwards."""
    r = post(plain_fake_server, "/abort_request", {"abort_all": True})
    assert r.status_code == 200, r.text
    bad = post(plain_fake_server, "/abort_request", {"rid": {"x": 1}})
    assert 400 <= bad.status_code < 500, (bad.status_code, bad.text)
    assert _completion(plain_fake_server, {"prompt": "after abort", "max_tokens": 1}).choices


def test_sglang_8115_health_is_200_only_when_up(tmp_path: Path) -> None:
    """sgl-project/sglang#8115: ``/health`` was a fixed 200 whatever the server's state. SGLang's
    ``ServerStatus``: only ``Up`` is healthy; ``Starting`` and ``UnHealthy`` are not. Expected:
    ``/health`` answers 503 while the status is ``Starting`` or ``UnHealthy`` and 200 once it is
    ``Up`` (``HEAD`` the same)."""
    with admin_app_client(tmp_path) as (client, tm):
        for status, code in (("Starting", 503), ("UnHealthy", 503), ("Up", 200)):
            tm.server_status = status
            assert client.get("/health").status_code == code, status
            assert client.head("/health").status_code == code, status


def _families(text: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(text)}


def test_pgcat_563_metrics_have_one_help_and_one_type_line_per_family(tmp_path: Path) -> None:
    """postgresml/pgcat#563 (and vespa-engine/vespa#13341): ``/metrics`` repeated ``# HELP`` /
    ``# TYPE`` lines for one metric, which Prometheus' text format forbids ("Only one HELP line
    may exist for any given metric name") and scrapers reject. Expected: after requests with two
    label sets (streamed and not), the ``/metrics`` route's body has exactly one ``HELP`` and one
    ``TYPE`` line per metric name, and ``prometheus_client``'s parser reads a family for each
    ``TYPE`` line (a counter's ``_total`` sample name read as its family)."""
    with admin_app_client(tmp_path) as (client, tm):
        tm.metrics.observe_finished(10, 3, 0.5, decode_s=0.2, is_streaming=True)
        tm.metrics.observe_finished(7, 2, 0.4, decode_s=0.1, is_streaming=False)
        tm.metrics.observe_ttft(0.1, is_streaming=True)
        tm.metrics.observe_ttft(0.2, is_streaming=False)
        r = client.get("/metrics")
    assert r.status_code == 200, r.text
    lines = r.text.splitlines()
    helps = [line.split()[2] for line in lines if line.startswith("# HELP ")]
    types = {line.split()[2]: line.split()[3] for line in lines if line.startswith("# TYPE ")}
    assert helps and len(helps) == len(set(helps)), [h for h in helps if helps.count(h) > 1]
    assert len(types) == sum(line.startswith("# TYPE ") for line in lines)
    assert set(helps) == set(types)
    fams = _families(r.text)
    for name, kind in types.items():
        family = name.removesuffix("_total") if kind == "counter" else name
        assert family in fams and fams[family].type == kind, (name, kind)


def test_pulsar_13869_histograms_are_cumulative_le_buckets() -> None:
    """apache/pulsar#13869: histogram buckets came out as separate gauges with the bound in the
    name instead of ``_bucket{le=...}`` series. Expected (Prometheus' histogram format, read by
    ``prometheus_client``'s parser): the TTFT family is a ``histogram`` whose ``_bucket`` series
    carry an ``le`` label, counts never go down as ``le`` grows, the ``+Inf`` bucket equals
    ``_count``, and ``_count`` / ``_sum`` are the three observations fed in (0.05 s, 0.3 s,
    2.0 s)."""
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    m = TokenizerMetrics("fake-v4")
    for s in (0.05, 0.3, 2.0):
        m.observe_ttft(s)
    fam = _families(m.render().decode())["sglang:time_to_first_token_seconds"]
    assert fam.type == "histogram"
    samples = [s for s in fam.samples if s.labels.get("is_streaming", "false") == "false"]
    buckets = sorted(
        ((float(s.labels["le"]), s.value) for s in samples if s.name.endswith("_bucket")), key=lambda b: b[0]
    )
    assert buckets and buckets[-1][0] == float("inf")
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)
    count = next(s.value for s in samples if s.name.endswith("_count"))
    total = next(s.value for s in samples if s.name.endswith("_sum"))
    assert buckets[-1][1] == count == 3
    assert total == pytest.approx(2.35)
    assert next(v for le, v in buckets if le >= 0.3) >= 2  # 0.05 and 0.3 are at or under 0.3


# --------------------------------------------------------------------------- the command line


def test_vllm_34326_served_model_name_does_not_swallow_the_model_dir(tmp_path: Path) -> None:
    """vllm-project/vllm#34326 (fix proposed in #34966): ``--served-model-name ASR
    Qwen/Qwen3-ASR-1.7B`` took the model as a second name, so the default model was served under
    both names with no error. Here the same command line (a model directory after the name, no
    ``--model-path``) would serve the embedded default model. Expected: the launcher exits with
    argparse's code 2 and one line naming ``--served-model-name`` and ``--model-path``, before any
    model is loaded; a later name that is no directory, or any with ``--model-path`` set, is a
    name as before."""
    from sglang_v4.launch_server import swallowed_model_path

    model_dir = tmp_path / "My-Model"
    model_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_v4.launch_server", "--served-model-name", "ASR", str(model_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "--served-model-name" in err[0] and f"--model-path {model_dir}" in err[0]
    assert swallowed_model_path(None, ["ASR", str(model_dir)]) == str(model_dir)
    assert swallowed_model_path(None, ["ASR", "org/not-a-dir"]) is None
    assert swallowed_model_path(str(model_dir), ["ASR", str(model_dir)]) is None
    assert swallowed_model_path(None, [str(model_dir)]) is None  # one name is a name
