"""``--skip-tokenizer-init`` (SGLang's flag) over the model-free ``FakeScheduler``: the server and
the ``Engine`` start on a model directory that has no tokenizer files, take ``input_ids`` only and
answer ``{"output_ids", "meta_info"}`` without ``text``.

The fake scheduler emits the tokens of ``FAKE_TEXT`` in order, so the expected ids are
``transformers.AutoTokenizer``'s tokenization of that text (independent of the runtime's own
tokenizer wrapper, which this server does not load). The real scheduler on the real model is
checked against a normal engine in ``test_engine_real_model.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import (
    ServerHandle,
    fake_env,
    fake_output_ids,
    hf_auto_tokenizer,
    hold_until_tag,
    make_fake_model_dir,
    sse_events,
    start_server,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def bare_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake model directory without tokenizer.json / tokenizer_config.json."""
    d = make_fake_model_dir(tmp_path_factory.mktemp("bare"), with_tokenizer=False)
    assert not (d / "tokenizer.json").exists()
    return d


@pytest.fixture(scope="module")
def server(bare_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    h = start_server(
        ["--model-path", str(bare_model_dir), "--skip-tokenizer-init"],
        fake_env({"FAKE_STEP_SLEEP": "0.01"}),
        log,
    )
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="module")
def tok():  # noqa: ANN201 - a transformers tokenizer
    return hf_auto_tokenizer()


def expected_ids(tok: Any, n: int) -> list[int]:
    """The first ``n`` ids the fake scheduler emits (``FAKE_TEXT``'s tokens, cycled)."""
    return fake_output_ids(tok, n)


def post(server: ServerHandle, path: str, body: dict[str, Any], status: int = 200) -> Any:
    r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def used_pages(server: ServerHandle) -> int:
    return requests.get(server.url + "/server_info", timeout=30).json()["kv_pool"]["used_pages"]


def test_input_ids_give_output_ids_without_text(server: ServerHandle, tok: Any) -> None:
    prompt = tok.encode("Hello world")
    out = post(server, "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": 7}})
    assert "text" not in out, out  # SGLang's shape without a tokenizer: no "text" key at all
    assert out["output_ids"] == expected_ids(tok, 7)
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 7}
    assert meta["prompt_tokens"] == len(prompt) and meta["completion_tokens"] == 7
    assert {"id", "cached_tokens", "e2e_latency", "weight_version"} <= set(meta)
    # a batch of prompts (and n > 1)
    outs = post(
        server, "/generate", {"input_ids": [[5, 6], [7]], "sampling_params": {"max_new_tokens": 3, "n": 2}}
    )
    assert [o["output_ids"] for o in outs] == [expected_ids(tok, 3)] * 4
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 2, 1, 1]
    assert all("text" not in o for o in outs)


def test_stream_carries_cumulative_output_ids(server: ServerHandle, tok: Any, tmp_path: Path) -> None:
    # the prompt's ids hold the request after its first token until the file exists: the stream
    # has a chunk before the last one however a loaded machine merges outputs
    release = tmp_path / "release"
    ids = tok.encode(hold_until_tag(release), add_special_tokens=False)
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 9}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r, release)
    assert events[0]["output_ids"] == expected_ids(tok, 1)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) >= 2 and all("text" not in c for c in chunks)
    # SGLang's default (no incremental streaming): each chunk has every output id so far
    for a, b in zip(chunks, chunks[1:]):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert chunks[-1]["output_ids"] == expected_ids(tok, 9)
    assert [len(c["output_ids"]) for c in chunks] == [c["meta_info"]["completion_tokens"] for c in chunks]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"


def test_stop_token_ids_still_stop_and_logprob_texts_are_none(server: ServerHandle, tok: Any) -> None:
    # the fake scheduler emits the smallest stop token id as the 4th token
    sp = {"max_new_tokens": 20, "stop_token_ids": [3]}
    out = post(server, "/generate", {"input_ids": [5], "sampling_params": sp})
    assert out["output_ids"] == [*expected_ids(tok, 3), 3]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": 3}
    body = {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 2},
        "return_logprob": True,
        "logprob_start_len": 0,
        "return_text_in_logprobs": True,
    }
    meta = post(server, "/generate", body)["meta_info"]
    assert [e[1] for e in meta["input_token_logprobs"]] == [5, 6, 7]
    assert [e[1] for e in meta["output_token_logprobs"]] == expected_ids(tok, 2)
    assert all(e[2] is None for e in meta["input_token_logprobs"] + meta["output_token_logprobs"])


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"text": "Hello"}, "pass the prompt as input_ids"),
        ({"text": ["a", "b"]}, "pass the prompt as input_ids"),
        ({"input_ids": [5], "sampling_params": {"stop": ["."]}}, "stop needs the tokenizer"),
        ({"input_ids": [5], "sampling_params": {"stop_regex": "a+"}}, "stop_regex needs the tokenizer"),
        ({"input_ids": [5], "sampling_params": {"regex": "a+"}}, "regex needs the tokenizer"),
        ({"input_ids": [5], "sampling_params": {"stop": "x"}, "stream": True}, "stop needs the tokenizer"),
    ],
)
def test_tokenizer_features_are_400(server: ServerHandle, body: dict[str, Any], needle: str) -> None:
    err = post(server, "/generate", body, status=400)["error"]
    assert needle in err["message"] and "--skip-tokenizer-init" in err["message"], err
    assert err["code"] == 400


def test_openai_generation_routes_are_400_models_still_listed(server: ServerHandle) -> None:
    for path, body in (
        ("/v1/completions", {"model": "x", "prompt": "Hello", "max_tokens": 2}),
        ("/v1/completions", {"model": "x", "prompt": [5, 6], "max_tokens": 2}),
        ("/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
    ):
        err = post(server, path, body, status=400)
        assert err["object"] == "error" and err["code"] == 400, err
        assert path in err["message"] and "input_ids" in err["message"], err
        assert err["error"]["message"] == err["message"]  # OpenAI's nested shape too
    models = requests.get(server.url + "/v1/models", timeout=30)
    assert models.status_code == 200 and models.json()["data"]


def test_no_pages_leak_after_errors_and_an_abandoned_stream(server: ServerHandle) -> None:
    body = {"input_ids": [9] * 10, "sampling_params": {"max_new_tokens": 400}, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
        first = next(ln for ln in lines if ln)
        assert b"output_ids" in first
        assert used_pages(server) > 0  # the request runs and holds its pages
    # closing the stream aborts the request; its pages come back
    deadline = time.time() + 30
    while used_pages(server) and time.time() < deadline:
        time.sleep(0.2)
    assert used_pages(server) == 0
    assert requests.get(server.url + "/health_generate", timeout=30).status_code == 200
    assert requests.get(server.url + "/health", timeout=30).status_code == 200


def test_engine_skip_tokenizer_init(bare_model_dir: Path, tok: Any) -> None:
    import os

    from sglang_v4 import Engine

    old = os.environ.get("SGLANG_V4_SCHEDULER_CLASS")
    os.environ["SGLANG_V4_SCHEDULER_CLASS"] = "server_fixture:FakeScheduler"
    try:
        eng = Engine(model_path=str(bare_model_dir), skip_tokenizer_init=True)
    finally:
        if old is None:
            os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
        else:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    with eng:
        assert eng.tokenizer_manager.tokenizer is None
        out = eng.generate(input_ids=[5, 6], sampling_params={"max_new_tokens": 4})
        assert out["output_ids"] == expected_ids(tok, 4) and "text" not in out
        chunks = list(eng.generate(input_ids=[5], sampling_params={"max_new_tokens": 5}, stream=True))
        assert chunks[-1]["output_ids"] == expected_ids(tok, 5) and all("text" not in c for c in chunks)
        with pytest.raises(ValueError, match="pass the prompt as input_ids"):
            eng.generate(prompt="Hello", sampling_params={"max_new_tokens": 2})
        with pytest.raises(ValueError, match="stop needs the tokenizer"):
            eng.generate(input_ids=[5], sampling_params={"stop": "."})
        assert eng.get_server_info()["kv_pool"]["used_pages"] == 0


def test_server_args_flag_and_model_dir_check(bare_model_dir: Path) -> None:
    import argparse

    from sglang_v4.entrypoints.engine import check_model_dir
    from sglang_v4.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert ServerArgs.from_cli_args(parser.parse_args(["--skip-tokenizer-init"])).skip_tokenizer_init is True
    assert ServerArgs.from_cli_args(parser.parse_args([])).skip_tokenizer_init is False
    with pytest.raises(ValueError, match="skip_tokenizer_init"):
        ServerArgs(skip_tokenizer_init="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tokenizer_path"):
        check_model_dir(str(bare_model_dir))
    check_model_dir(str(bare_model_dir), skip_tokenizer_init=True)  # no tokenizer needed


def test_real_scheduler_without_tokenizer_files(sched_model_dir: str, tmp_path: Path) -> None:
    """The real ``Scheduler`` with ``skip_tokenizer_init`` on a checkpoint without tokenizer files:
    no tokenizer, no grammars; ``stop_token_ids`` end a greedy run where that token first appears
    (the oracle: the same prompt's run with ``ignore_eos``); a stop string that reached it anyway
    is a 400 abort, not a crash; no page is left in use."""
    import os

    from scheduler_testutil import assert_idle, drain, make_scheduler, submit

    bare = tmp_path / "model"
    bare.mkdir()
    for name in os.listdir(sched_model_dir):
        if not name.startswith("tokenizer"):
            os.symlink(os.path.join(sched_model_dir, name), bare / name)
    s = make_scheduler(str(bare), skip_tokenizer_init=True)
    assert s.tokenizer is None and not s.grammar_enabled and s.eos_ids
    prompt = [5, 17, 300, 42]
    submit(s, "free", prompt, 6)
    free = drain(s)["free"]["ids"]
    stop = free[2]
    submit(s, "stop", prompt, 6, ignore_eos=False, sampling={"stop_token_ids": [stop]})
    submit(s, "text", prompt, 6, sampling={"stop": ["x"]})
    res = drain(s)
    assert res["stop"]["ids"] == free[: free.index(stop) + 1]
    assert res["stop"]["finish"] == {"type": "stop", "matched": stop}
    assert res["text"]["finish"]["type"] == "abort" and res["text"]["finish"]["status_code"] == 400
    assert_idle(s)
