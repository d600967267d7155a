"""``sglang_v4.Engine`` (offline API) over the real processes with the model-free FakeScheduler.

Expected texts come from ``transformers.AutoTokenizer`` on the same tokenizer files (independent
of the runtime's own tokenizer wrapper).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from server_fixture import (
    fake_output_text,
    hf_auto_tokenizer,
    hold_until_tag,
    make_fake_model_dir,
    release_later,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def engine(shared_fake_engine):  # noqa: ANN001, ANN201 - conftest's session Engine on FakeScheduler
    return shared_fake_engine


@pytest.fixture(scope="module")
def tok():
    return hf_auto_tokenizer()


def expected(tok, n: int) -> str:
    return fake_output_text(tok, n)


def test_generate_single_and_batch(engine, tok):
    out = engine.generate(prompt="Hello", sampling_params={"max_new_tokens": 6})
    assert out["text"] == expected(tok, 6)
    assert out["meta_info"]["prompt_tokens"] == len(tok.encode("Hello"))
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert len(out["output_ids"]) == 6
    outs = engine.generate(
        prompt=["a", "b c"], sampling_params=[{"max_new_tokens": 2}, {"max_new_tokens": 4}]
    )
    assert [o["text"] for o in outs] == [expected(tok, 2), expected(tok, 4)]
    outs = engine.generate(input_ids=[[1, 2, 3], [4]], sampling_params={"max_new_tokens": 1})
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [3, 1]
    out = engine.generate(input_ids=[7, 8], sampling_params={"max_new_tokens": 2, "n": 3})
    assert isinstance(out, list) and len(out) == 3


def test_generate_stream(engine, tok, tmp_path: Path):
    # held after its first token until the file exists: the stream has a chunk before the last
    # one however a loaded machine merges the outputs that arrived meanwhile
    release = tmp_path / "release"
    it = engine.generate(
        prompt=f"Hi {hold_until_tag(release)}", sampling_params={"max_new_tokens": 10}, stream=True
    )
    timer = release_later(release)
    try:
        chunks = [next(it)]
    finally:
        timer.cancel()
        release.touch()  # a failed read must not leave the shared engine a held request
    assert chunks[0]["text"] == expected(tok, 1) and chunks[0]["meta_info"]["finish_reason"] is None
    chunks += list(it)
    assert len(chunks) >= 2
    assert chunks[-1]["text"] == expected(tok, 10)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(b["text"].startswith(a["text"]) for a, b in zip(chunks, chunks[1:]))


def test_generate_logprobs(engine):
    out = engine.generate(
        input_ids=[5, 6, 7],
        sampling_params={"max_new_tokens": 2},
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=1,
    )
    m = out["meta_info"]
    assert [e[1] for e in m["input_token_logprobs"]] == [5, 6, 7]
    assert m["input_token_logprobs"][0][0] is None and m["input_token_logprobs"][1][2] is None
    assert [e[1] for e in m["output_token_logprobs"]] == out["output_ids"]
    assert len(m["output_top_logprobs"]) == 2


def test_generate_token_ids_logprob(engine):
    """SGLang's ``Engine.generate(token_ids_logprob=...)`` (was a ``ValueError`` "not supported"):
    per position one ``[logprob, id, None]`` per asked id, in its order, ``None`` for the first
    prompt position (values: FakeScheduler's -1 - 0.001 * id); ids outside the vocabulary are a
    ``ValueError`` naming the field."""
    out = engine.generate(
        input_ids=[5, 6, 7],
        sampling_params={"max_new_tokens": 2},
        return_logprob=True,
        logprob_start_len=0,
        token_ids_logprob=[9, 3],
    )
    want = [[-1.0 - 0.001 * t, t, None] for t in (9, 3)]
    m = out["meta_info"]
    assert m["input_token_ids_logprobs"] == [None, want, want]
    assert m["output_token_ids_logprobs"] == [want, want]
    with pytest.raises(ValueError, match="token_ids_logprob"):
        engine.generate(input_ids=[5], return_logprob=True, token_ids_logprob=[10**9])


def test_bad_input_raises_value_error(engine):
    with pytest.raises(ValueError, match="not_a_param"):
        engine.generate(prompt="a", sampling_params={"not_a_param": 1})
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate(input_ids=[10**9])
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(prompt="a", sampling_params={"max_new_tokens": -2})
    assert (
        engine.generate(prompt="fine", sampling_params={"max_new_tokens": 1})["meta_info"][
            "completion_tokens"
        ]
        == 1
    )


def test_async_generate(engine, tok):
    async def main():
        outs = await asyncio.gather(
            *(engine.async_generate(prompt=f"p{i}", sampling_params={"max_new_tokens": 3}) for i in range(4))
        )
        chunks = [
            c
            async for c in await engine.async_generate(
                prompt="s", sampling_params={"max_new_tokens": 3}, stream=True
            )
        ]
        return outs, chunks

    outs, chunks = asyncio.run(main())
    assert [o["text"] for o in outs] == [expected(tok, 3)] * 4
    assert chunks[-1]["text"] == expected(tok, 3)


def test_flush_cache_and_server_info(engine):
    ret = engine.flush_cache()
    assert ret.success is True and ret.message == "" and ret
    info = engine.get_server_info()
    assert info["page_size"] == 256 and info["kv_pool"]["used_pages"] == 0
    assert info["context_len"] > 0


def test_server_info_carries_version_and_startup_time(engine):
    """``Engine.get_server_info()`` answers what ``/get_server_info`` does, as SGLang's Engine:
    ``version`` (the package version, read here from pyproject.toml) and ``startup_time`` (when the
    engine came up, seconds since the epoch) were missing from the offline API's dict."""
    import re
    import time

    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    info = engine.get_server_info()
    assert info["version"] == version
    # the shared session engine may have started long before this test (a loaded CI box): bound
    # the stamp by the fixture's creation, not by a wall-clock window
    assert engine.test_created_after <= info["startup_time"] <= time.time()
    assert info["internal_states"][0]["kv_pool"] == info["kv_pool"]


def test_engine_arg_errors():
    from sglang_v4 import Engine

    with pytest.raises(ValueError, match="no_such_option"):
        Engine(model_path="/nonexistent", no_such_option=1)
    with pytest.raises(ValueError, match="page_size"):
        Engine(model_path="/nonexistent", page_size=100)
    with pytest.raises(ValueError, match="model_path"):
        Engine(model_path=str(Path("/nonexistent/dir")))


def test_stream_closed_early_aborts(engine):
    import time

    # held: it never ends by itself, so only the abort can free its pages
    it = engine.generate(prompt="[hold] long", sampling_params={"max_new_tokens": 450}, stream=True)
    first = next(it)
    assert first["meta_info"]["finish_reason"] is None
    assert engine.get_server_info()["kv_pool"]["used_pages"] > 0
    it.close()  # the caller stops reading: the request is aborted and its pages freed
    deadline = time.time() + 30
    while time.time() < deadline and engine.get_server_info()["kv_pool"]["used_pages"] != 0:
        time.sleep(0.05)
    assert engine.get_server_info()["kv_pool"]["used_pages"] == 0


def test_log_requests_and_weight_version(tmp_path: Path, tok, caplog: pytest.LogCaptureFixture) -> None:
    """``--log-requests --log-requests-level 1 --log-requests-format json`` (SGLang's flags): one JSON
    line per received and finished request, with the sampling params and no input / output (level
    1 per SGLang's help). Level 2 cuts the input to 2048 characters / ids, level 3 keeps it all."""
    import json
    import logging

    from sglang_v4 import Engine
    from sglang_v4.managers.request_log import received_line

    model = make_fake_model_dir(tmp_path / "model")
    os.environ["SGLANG_V4_SCHEDULER_CLASS"] = "server_fixture:FakeScheduler"
    try:
        eng = Engine(
            model_path=str(model),
            log_requests=True,
            log_requests_level=1,
            log_requests_format="json",
            weight_version="ckpt-0731",
        )
    finally:
        os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    sp = {"max_new_tokens": 3, "temperature": 0}
    with eng, caplog.at_level(logging.INFO, logger="sglang_v4.managers.tokenizer_manager"):
        out = eng.generate(prompt="Hello there", sampling_params=sp, rid="log-me")
    assert out["meta_info"]["weight_version"] == "ckpt-0731"  # SGLang's --weight-version
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    got = {line["event"]: line for line in lines if line.get("rid") == "log-me"}
    assert set(got) == {"request.received", "request.finished"}, lines
    assert got["request.received"]["prompt_tokens"] == len(tok.encode("Hello there"))
    assert got["request.received"]["sampling_params"] == sp
    fin = got["request.finished"]
    assert fin["completion_tokens"] == 3 and fin["finish_reason"] == {"type": "length", "length": 3}
    assert not {"text", "input_ids", "output_text", "output_ids"} & (set(fin) | set(got["request.received"]))
    long_text = "x" * 5000
    ids = list(range(3000))
    two = json.loads(received_line("r", ids, long_text, sp, 2, "json"))
    assert two["text"].startswith("x" * 2048) and "2952 more" in two["text"]
    assert two["input_ids"][:2048] == ids[:2048] and len(two["input_ids"]) == 2049
    three = json.loads(received_line("r", ids, long_text, sp, 3, "json"))
    assert (three["text"], three["input_ids"]) == (long_text, ids)
    zero = received_line("r", ids, long_text, sp, 0, "text")
    assert zero == "Receive: rid=r prompt_tokens=3000"
    with pytest.raises(ValueError, match="log_requests_level"):
        Engine(model_path=str(model), log_requests_level=4)
