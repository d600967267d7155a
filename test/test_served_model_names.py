"""``--served-model-name`` with several names and ``--model-path`` spellings.

* vLLM's ``--served-model-name a b`` (``nargs="+"``): every name is accepted by the routes and
  listed by ``/v1/models`` (OpenAI's and Anthropic's shapes), the first is the one reported
  (``get_model_info``, metrics); a response echoes the name the request sent, as SGLang's do.
  Before, argparse refused the second name ("unrecognized arguments"). ``Engine`` / ``ServerArgs``
  take a list too; an empty list or an empty name is refused naming the field.
* ``--model-path /models/DeepSeek-V4-Flash/`` (trailing slash): the served id is the directory's
  name, and the model path is accepted in both spellings (the one without the slash was a 404);
  ``--model-path .`` names the current directory (the id was ``"."``).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai_fake_tm import FakeTM, oai_client
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.server_args import ServerArgs
from tokenizer_testutil import tiny_tokenizer_json

CONFIG = Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"


def _parse(argv: list[str]) -> ServerArgs:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def _client(tok: Any, sa: ServerArgs) -> tuple[FakeTM, TestClient]:
    tm = FakeTM(tok)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return tm, TestClient(app)


def test_several_served_names(tok: Any) -> None:
    sa = _parse(
        ["--device", "cpu", "--model-path", "/models/V4", "--served-model-name", "dsv4", "deepseek-v4"]
    )
    assert (sa.served_model_name, sa.served_model_aliases) == ("dsv4", ["deepseek-v4"])
    assert _parse(["--device", "cpu", "--served-model-name", "one"]).served_model_name == "one"
    _, c = _client(tok, sa)
    client = oai_client(c)
    assert [m.id for m in client.models.list().data] == ["dsv4", "deepseek-v4"]
    for name in ("dsv4", "deepseek-v4", "default", "/models/V4"):
        r = client.chat.completions.create(
            model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        assert r.model == name
        assert c.get(f"/v1/models/{name}").status_code == 200
    r = c.post(
        "/v1/chat/completions", json={"model": "other", "messages": [{"role": "user", "content": "x"}]}
    )
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"
    anthropic = c.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert [m["id"] for m in anthropic["data"]] == ["dsv4", "deepseek-v4"]


def test_served_names_as_a_list_and_refusals() -> None:
    sa = ServerArgs(device="cpu", served_model_name=["a", "b", "a", "b", "c"])
    assert (sa.served_model_name, sa.served_model_aliases, sa.served_model_names()) == (
        "a",
        ["b", "c"],
        ["a", "b", "c"],
    )
    for bad in ([], ["a", ""], [1]):
        with pytest.raises(ValueError, match="served_model_name"):
            ServerArgs(device="cpu", served_model_name=bad)


def test_model_path_with_trailing_slash(tok: Any) -> None:
    sa = ServerArgs(device="cpu", model_path="/models/DeepSeek-V4-Flash/")
    assert sa.served_model_names() == ["DeepSeek-V4-Flash"]
    _, c = _client(tok, sa)
    for name in ("DeepSeek-V4-Flash", "/models/DeepSeek-V4-Flash/", "/models/DeepSeek-V4-Flash"):
        r = c.post("/v1/completions", json={"model": name, "prompt": "x", "max_tokens": 1})
        assert r.status_code == 200, (name, r.text)


def test_relative_model_path_names_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model-path .`` (or ``./``) from inside the model directory: the id is the directory's
    name (it was ``"."``), and the directory checks pass on the relative path."""
    d = tmp_path / "DeepSeek-V4-Mini"
    d.mkdir()
    shutil.copy(CONFIG, d / "config.json")
    tiny_tokenizer_json(d / "tokenizer.json")
    monkeypatch.chdir(d)
    for path in (".", "./", "../DeepSeek-V4-Mini"):
        assert ServerArgs(device="cpu", model_path=path).served_model_names() == ["DeepSeek-V4-Mini"], path
        check_model_dir(path, load_format="dummy")


def test_model_path_without_trailing_slash_accepts_it_with_one(tok: Any) -> None:
    """``--model-path /models/DeepSeek-V4-Flash`` (no slash): a request naming the path with a
    trailing ``/`` was a 404 ("The model `/models/DeepSeek-V4-Flash/` does not exist.") though a
    server launched with the slash accepts both spellings. Every route that checks ``model``
    accepts both now; another name is still a 404."""
    sa = ServerArgs(device="cpu", model_path="/models/DeepSeek-V4-Flash")
    router = create_openai_router(FakeTM(tok), sa)
    app = FastAPI()
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    c = TestClient(app)
    user = [{"role": "user", "content": "hi"}]
    for name in ("/models/DeepSeek-V4-Flash/", "/models/DeepSeek-V4-Flash", "DeepSeek-V4-Flash/"):
        for route, body in (
            ("/v1/chat/completions", {"messages": user, "max_tokens": 1}),
            ("/v1/completions", {"prompt": "x", "max_tokens": 1}),
            ("/v1/responses", {"input": "hi", "max_output_tokens": 1}),
            ("/v1/messages", {"messages": user, "max_tokens": 1}),
        ):
            r = c.post(route, json=dict(body, model=name))
            assert r.status_code == 200, (name, route, r.text)
        assert c.get(f"/v1/models/{name}").status_code == 200, name
    r = c.post("/v1/completions", json={"model": "/models/DeepSeek-V4", "prompt": "x", "max_tokens": 1})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model", r.text
