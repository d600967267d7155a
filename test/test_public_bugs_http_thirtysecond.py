"""A thirty-second set of public bug reports on the server's HTTP layer: request bodies sent with
``Content-Encoding`` (gzip, x-gzip, deflate as zlib and raw, stacked codings, unsupported codings,
corrupt data, a small body that decodes past the body limit), ``GET`` / ``HEAD /v1/models/`` with a
trailing slash (bare and behind ``--root-path``), the trailing-slash redirect of a ``POST`` under a
path prefix, ``Content-Type`` with a charset, in other letter case or missing, and duplicate keys in
a JSON body.

Faults found here and fixed: a ``Content-Encoding: gzip`` / ``deflate`` body was read as JSON as
sent and refused as "not valid UTF-8" (every route); an unsupported coding (``br``, ``zstd``)
was refused as invalid JSON instead of 415 with ``Accept-Encoding``; ``GET /v1/models/`` was read
by the ``/v1/models/{model}`` route as the model ``""`` and answered 404 instead of the list.
The other reports passed as-is and are kept as regression tests.

Fixture: the app of ``http_server.create_app`` in-process (no lifespan) with ``--api-key`` and
``--root-path /my-model`` over a ``TokenizerManager`` whose scheduler never answers
(``admin_app_testutil``), so every answer checked here comes before generation.
Oracles: RFC 9110 (sections 8.4 content codings, 12.5.3 ``Accept-Encoding``, 15.5.16 status 415,
8.3.1 media-type case and parameters), RFC 8259 (JSON text; Python's ``json.loads`` keeps the
last of duplicate names, as browsers' ``JSON.parse`` does), the same request sent uncompressed (a
cold run), the DeepSeek-V4 ``tokenizer.json`` read by the ``tokenizers`` library, and the ``openai``
client's ``Model`` type.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES, admin_app_client
from openai.types import Model
from server_fixture import tokenizer_source_dir
from tokenizers import Tokenizer

pytestmark = pytest.mark.timeout(60)

PREFIX = "/my-model"
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
ANTHROPIC_AUTH = {"x-api-key": ADMIN_KEY, "anthropic-version": "2023-06-01"}
JSON_CT = {"content-type": "application/json"}
#: a chat body the server refuses before generation, naming ``max_tokens`` (OpenAI's 400)
BAD_CHAT = {"model": ADMIN_NAMES[0], "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}
PROMPT = "The quick brown fox jumps over the lazy dog, 123 times."


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A ``TestClient`` over ``create_app`` with ``--api-key`` and ``--root-path /my-model``."""
    with admin_app_client(Path(tmp_path_factory.mktemp("http32")), root_path=PREFIX) as (tc, _tm):
        yield tc


@functools.cache
def _oracle_tokenizer() -> Tokenizer:
    """The DeepSeek-V4 ``tokenizer.json`` loaded by the ``tokenizers`` library itself (no runtime
    wrapper; a fraction of the time ``transformers`` takes to load it)."""
    return Tokenizer.from_file(os.path.join(tokenizer_source_dir(), "tokenizer.json"))


def _tokens(text: str) -> list[int]:
    """The DeepSeek-V4 tokenizer's ids of ``text`` (no special tokens): ``/tokenize``'s oracle."""
    return _oracle_tokenizer().encode(text, add_special_tokens=False).ids


def _post(tc: Any, path: str, body: bytes, **headers: str) -> Any:
    return tc.post(path, content=body, headers={**AUTH, **JSON_CT, **headers})


# --------------------------------------------------------------------------- Content-Encoding


def test_codex_proxy_rs_66_gzip_body_decoded_on_every_route_family(client: Any) -> None:
    """zyycn/codex-proxy-rs#66 (the Codex client compresses large request bodies with
    ``Content-Encoding: gzip`` / ``zstd``; the server read the compressed bytes as JSON and
    answered "Request body must be valid JSON"). RFC 9110 section 8.4: the body is the coded
    representation, the route must see the decoded one. Oracle: the same request uncompressed
    (a cold run) -- the OpenAI chat route's 400 naming ``max_tokens``, ``/tokenize``'s ids (also
    the tokenizer's own) and Anthropic's ``count_tokens``."""
    raw = json.dumps(BAD_CHAT).encode()
    plain = _post(client, "/v1/chat/completions", raw)
    packed = _post(client, "/v1/chat/completions", gzip.compress(raw), **{"content-encoding": "gzip"})
    assert plain.status_code == packed.status_code == 400, packed.text
    assert packed.json()["error"]["param"] == "max_tokens"
    assert packed.json()["error"]["message"] == plain.json()["error"]["message"]

    tok = json.dumps({"model": ADMIN_NAMES[0], "prompt": PROMPT}).encode()
    r = _post(client, PREFIX + "/tokenize", gzip.compress(tok), **{"content-encoding": "gzip"})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == _post(client, "/tokenize", tok).json()["tokens"] == _tokens(PROMPT)

    msgs = json.dumps({"model": ADMIN_NAMES[0], "messages": [{"role": "user", "content": PROMPT}]}).encode()
    path = "/v1/messages/count_tokens"
    cold = client.post(path, content=msgs, headers={**ANTHROPIC_AUTH, **JSON_CT})
    r = client.post(
        path, content=gzip.compress(msgs), headers={**ANTHROPIC_AUTH, **JSON_CT, "content-encoding": "gzip"}
    )
    assert cold.status_code == r.status_code == 200, r.text
    assert r.json() == cold.json()


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("deflate", zlib.compress),  # RFC 9110 8.4.1.2: the zlib format
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # raw deflate, as some clients send
        ("deflate, gzip", lambda b: gzip.compress(zlib.compress(b))),  # in the order applied
        ("identity", lambda b: b),
        ("gzip", lambda b: gzip.compress(b[:20]) + gzip.compress(b[20:])),  # two gzip members
    ],
    ids=["x-gzip", "upper-case", "deflate-zlib", "deflate-raw", "stacked", "identity", "two-members"],
)
def test_ollama_12386_curl_compressed_tokenize(client: Any, coding: str, encode: Any) -> None:
    """ollama/ollama#12386 (``curl --data-binary @req.json.gz -H "Content-Encoding: gzip"``
    answered "invalid character '\\x1f' looking for beginning of value": the header was ignored).
    Every coding of RFC 9110 section 8.4.1 the server takes (names case-insensitive, ``x-gzip``
    as ``gzip``, stacked codings undone last first, a multi-member gzip file) gives the ids of the
    uncompressed prompt. Oracle: the DeepSeek-V4 tokenizer."""
    body = json.dumps({"model": ADMIN_NAMES[0], "prompt": PROMPT}).encode()
    r = _post(client, "/tokenize", encode(body), **{"content-encoding": coding})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == _tokens(PROMPT)


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, br"])
def test_sub2api_2081_unsupported_coding_is_415_with_accept_encoding(client: Any, coding: str) -> None:
    """Wei-Shaw/sub2api#2081 (``Content-Encoding: zstd`` bodies were read undecoded and refused as
    "Failed to parse request body"). A coding the server cannot decode is RFC 9110's 415
    (section 15.5.16) with an ``Accept-Encoding`` response header naming the codings it takes
    (section 12.5.3), in the route's error shape (OpenAI's here, Anthropic's on ``/v1/messages``);
    the request id is echoed and CORS headers are set as on every answer."""
    headers = {"content-encoding": coding, "x-request-id": "req-32am", "origin": "https://app.example"}
    r = _post(client, "/v1/chat/completions", b"\x28\xb5\x2f\xfd junk", **headers)
    assert r.status_code == 415, r.text
    assert {c.strip() for c in r.headers["accept-encoding"].split(",")} == {"gzip", "deflate"}
    err = r.json()["error"]
    assert err["code"] == 415 and "Content-Encoding" in err["message"]
    assert r.headers["x-request-id"] == "req-32am"
    assert r.headers["access-control-allow-origin"] in ("*", "https://app.example")

    a = client.post(
        "/v1/messages", content=b"x", headers={**ANTHROPIC_AUTH, **JSON_CT, "content-encoding": coding}
    )
    assert a.status_code == 415 and a.json()["type"] == "error", a.text
    assert "Content-Encoding" in a.json()["error"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"\x1f\x8bnot gzip",  # gzip magic, then garbage
        gzip.compress(json.dumps(BAD_CHAT).encode(), mtime=0)[:-12],  # truncated stream
        json.dumps(BAD_CHAT).encode(),  # plain JSON labelled gzip
    ],
    ids=["garbage", "truncated", "not-coded"],
)
def test_codex_proxy_rs_66_corrupt_coded_body_is_400_naming_content_encoding(
    client: Any, body: bytes
) -> None:
    """zyycn/codex-proxy-rs#66 (a corrupt compressed payload must be a client error, not a server
    fault). A body that is not valid data of its declared coding: 400 whose message names
    ``Content-Encoding`` (the field at fault), and the server keeps answering."""
    r = _post(client, "/v1/chat/completions", body, **{"content-encoding": "gzip"})
    assert r.status_code == 400, r.text
    assert "Content-Encoding" in r.json()["error"]["message"]
    assert client.get("/v1/models", headers=AUTH).status_code == 200


def test_codex_proxy_rs_66_decompression_bomb_is_413(client: Any) -> None:
    """zyycn/codex-proxy-rs#66 (decoded bodies over the size limit are refused, a defence against
    decompression bombs). 65 MiB of spaces gzip to ~65 KiB, under the 64 MiB body limit as
    sent; decoded they exceed it: 413, as the same body sent uncompressed gets."""
    raw = b" " * (65 * 1024 * 1024)
    packed = gzip.compress(raw, compresslevel=9)
    assert len(packed) < 1024 * 1024
    r = _post(client, "/tokenize", packed, **{"content-encoding": "gzip"})
    assert r.status_code == 413, r.text
    assert "limit" in r.json()["error"]["message"]
    assert client.get("/v1/models", headers=AUTH).status_code == 200


# --------------------------------------------------------------------------- trailing slashes


@pytest.mark.parametrize("prefix", ["", PREFIX])
def test_unsloth_9876_models_with_trailing_slash_lists_the_models(client: Any, prefix: str) -> None:
    """unslothai/unsloth#9876 (clients probing ``GET /v1/models/`` got the ``/v1/models/{id}``
    route's 404 for the model ``""`` instead of the list; vllm-project/aibrix#1740: both forms
    must answer). ``/v1/models/`` answers the list of ``/v1/models``, ``HEAD`` too (RFC 9110
    9.3.2: the GET's status and headers, no body), bare and behind ``--root-path``. Oracle: the
    ``openai`` client's ``Model`` type and the served names."""
    bare = client.get("/v1/models", headers=AUTH)
    slashed = client.get(prefix + "/v1/models/", headers=AUTH)
    assert slashed.status_code == 200, slashed.text
    body = slashed.json()
    assert body["object"] == "list"
    assert [Model.model_validate(m).id for m in body["data"]] == ADMIN_NAMES
    assert [m["id"] for m in bare.json()["data"]] == ADMIN_NAMES
    head = client.head(prefix + "/v1/models/", headers=AUTH)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(slashed.content)
    one = client.get(prefix + f"/v1/models/{ADMIN_NAMES[0]}", headers=AUTH)
    assert one.status_code == 200 and Model.model_validate(one.json()).id == ADMIN_NAMES[0]


@pytest.mark.parametrize("path", ["/v1/chat/completions/", PREFIX + "/v1/chat/completions/"])
def test_starlette_1130_trailing_slash_redirect_keeps_the_prefix_once(client: Any, path: str) -> None:
    """Kludex/starlette#1130 (behind ``--root-path`` the trailing-slash redirect duplicated or
    dropped the prefix). ``POST .../v1/chat/completions/`` is redirected with 307 (RFC 9110
    15.4.8: method and body kept) to the same path without the slash -- the prefix exactly as
    the client sent it -- and following it gives the answer of the direct request."""
    raw = json.dumps(BAD_CHAT).encode()
    r = client.post(path, content=raw, headers={**AUTH, **JSON_CT}, follow_redirects=False)
    assert r.status_code == 307, r.text
    assert r.headers["location"].endswith(path.rstrip("/"))
    assert r.headers["location"].count(PREFIX) == path.count(PREFIX)
    followed = client.post(path, content=raw, headers={**AUTH, **JSON_CT})
    direct = _post(client, path.rstrip("/"), raw)
    assert followed.status_code == direct.status_code == 400
    assert followed.json() == direct.json()


# --------------------------------------------------------------------------- Content-Type, JSON


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        'application/json ; charset="utf-8"',
        None,
    ],
)
def test_openai_openapi_194_json_with_a_charset_is_json(client: Any, content_type: str | None) -> None:
    """openai/openai-openapi#194 (``Content-Type: application/json; charset=utf-8`` was refused as
    an unsupported content type). RFC 9110 8.3.1: type and parameter names are case-insensitive
    and ``charset`` is a parameter of the JSON media type; a body without ``Content-Type`` (as
    ``curl --data-binary`` sends) is read as JSON too. The route reads the body and answers its
    field error (400 naming ``max_tokens``), as for ``application/json``."""
    headers = dict(AUTH)
    if content_type is not None:
        headers["content-type"] = content_type
    r = client.post("/v1/chat/completions", content=json.dumps(BAD_CHAT).encode(), headers=headers)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_tokens"


def test_arduinojson_1095_duplicate_keys_take_the_last_value(client: Any) -> None:
    """bblanchon/ArduinoJson#1095 (duplicate object names: RFC 8259 section 4 says names SHOULD
    be unique and leaves duplicates to the implementation; the major parsers keep the last value).
    A body with ``prompt`` twice is read as Python's ``json.loads`` reads it. Oracle:
    ``json.loads`` and the DeepSeek-V4 tokenizer."""
    raw = '{"model": "MODEL", "prompt": "first text", "prompt": "PROMPT"}'
    raw = raw.replace("MODEL", ADMIN_NAMES[0]).replace("PROMPT", PROMPT)
    assert json.loads(raw)["prompt"] == PROMPT
    r = _post(client, "/tokenize", raw.encode())
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == _tokens(PROMPT)

    nested = (
        '{"model": "MODEL", "max_tokens": 5, "max_tokens": -1, '
        '"messages": [{"role": "user", "content": "a"}]}'
    ).replace("MODEL", ADMIN_NAMES[0])
    assert json.loads(nested)["max_tokens"] == -1
    r = _post(client, "/v1/chat/completions", nested.encode())
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens", r.text
