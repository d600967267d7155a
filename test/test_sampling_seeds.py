"""Seeded parallel sampling (``n > 1``) on the embedded model, through every entry point.

The rule (``sampling_params.derive_choice_seed``, vLLM's): sample ``k`` of a request seeded with
``s`` draws with seed ``s + k``. So the ``n`` choices differ (they once were ``n`` copies of one
draw), the whole response repeats for the same seed, and -- the independent oracle -- choice ``k``
equals a single request (``n=1``) with seed ``s + k``. Checked for OpenAI ``/v1/completions`` and
``/v1/chat/completions`` (``seed``), native ``/generate`` (``sampling_seed``; one prompt, a batch
of prompts x n, streaming) and the offline ``Engine``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import requests
from server_fixture import REPO, ServerHandle, real_env, sse_events, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SEED = 1234
SP = {"temperature": 1.0, "max_new_tokens": 8, "ignore_eos": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    from sglang_v4.tools.default_model import ensure_default_model

    ensure_default_model()
    env = real_env()
    h = start_server(["--skip-warmup"], env, tmp_path_factory.mktemp("seeds") / "server.log", timeout_s=600)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> Any:
    r = requests.post(server.url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def _gen(server: ServerHandle, text: Any, **sp: Any) -> Any:
    return _post(server, "/generate", {"text": text, "sampling_params": {**SP, **sp}})


def test_native_n_with_seed_is_distinct_repeatable_and_seed_plus_k(server) -> None:
    outs = _gen(server, "Once upon a time", n=3, sampling_seed=SEED)
    ids = [o["output_ids"] for o in outs]
    assert len(ids) == 3 and len({tuple(x) for x in ids}) == 3, ids
    again = [o["output_ids"] for o in _gen(server, "Once upon a time", n=3, sampling_seed=SEED)]
    assert again == ids
    singles = [_gen(server, "Once upon a time", sampling_seed=SEED + k)["output_ids"] for k in range(3)]
    assert singles == ids


def test_native_batch_of_prompts_times_n(server) -> None:
    prompts = ["The sky is", "def main():"]
    outs = _gen(server, prompts, n=2, sampling_seed=SEED)
    # grouped by prompt (SGLang's order): [p0 s0, p0 s1, p1 s0, p1 s1]
    got = [o["output_ids"] for o in outs]
    want = [_gen(server, p, sampling_seed=SEED + k)["output_ids"] for p in prompts for k in range(2)]
    assert got == want
    assert got[0] != got[1] and got[2] != got[3]


def test_native_streaming_n_with_seed(server) -> None:
    body = {
        "text": "Once upon a time",
        "sampling_params": {**SP, "n": 3, "sampling_seed": SEED},
        "stream": True,
    }
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=300) as r:
        events = sse_events(r)
    final: dict[int, list[int]] = {}
    for e in events[:-1]:
        final[e["index"]] = e["output_ids"]
    plain = [o["output_ids"] for o in _gen(server, "Once upon a time", n=3, sampling_seed=SEED)]
    assert [final[i] for i in range(3)] == plain


def test_openai_completions_n_with_seed(server) -> None:
    body = {"model": "default", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "n": 3}
    body["seed"] = SEED
    texts = [c["text"] for c in _post(server, "/v1/completions", body)["choices"]]
    assert len(set(texts)) == 3, texts
    assert [c["text"] for c in _post(server, "/v1/completions", body)["choices"]] == texts
    singles = [
        _post(server, "/v1/completions", {**body, "n": 1, "seed": SEED + k})["choices"][0]["text"]
        for k in range(3)
    ]
    assert singles == texts


def test_openai_chat_n_with_seed_streaming_and_not(server) -> None:
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 8,
        "temperature": 1.0,
        "n": 3,
        "seed": SEED,
    }
    texts = [c["message"]["content"] for c in _post(server, "/v1/chat/completions", body)["choices"]]
    assert len(set(texts)) == 3, texts
    with requests.post(
        server.url + "/v1/chat/completions", json={**body, "stream": True}, stream=True, timeout=300
    ) as r:
        events = sse_events(r)
    streamed = {i: "" for i in range(3)}
    for e in events[:-1]:
        for c in e["choices"]:
            streamed[c["index"]] += c["delta"].get("content") or ""
    assert [streamed[i] for i in range(3)] == texts
    single = _post(server, "/v1/chat/completions", {**body, "n": 1, "seed": SEED + 2})
    assert single["choices"][0]["message"]["content"] == texts[2]


def test_seed_at_the_int64_edge_wraps(server) -> None:
    top = 2**63 - 1
    outs = _gen(server, "Edge", n=2, sampling_seed=top)
    assert outs[1]["output_ids"] == _gen(server, "Edge", sampling_seed=-(2**63))["output_ids"]


def test_engine_n_with_seed(tmp_path) -> None:
    """The offline Engine takes the same path (tokenizer manager): distinct, repeatable, seed + k."""
    import subprocess
    import sys

    script = tmp_path / "engine_seeds.py"
    script.write_text(
        "import json, sys\n"
        "from sglang_v4 import Engine\n"
        "if __name__ == '__main__':\n"
        "    sp = {'temperature': 1.0, 'max_new_tokens': 6, 'ignore_eos': True}\n"
        "    with Engine(device='cpu', skip_warmup=True) as e:\n"
        f"        many = e.generate(prompt='Hello', sampling_params={{**sp, 'n': 3, 'sampling_seed': {SEED}}})\n"
        f"        again = e.generate(prompt='Hello', sampling_params={{**sp, 'n': 3, 'sampling_seed': {SEED}}})\n"
        f"        one = [e.generate(prompt='Hello', sampling_params={{**sp, 'sampling_seed': {SEED} + k}}) for k in range(3)]\n"
        "        stream = list(e.generate(prompt='Hello', sampling_params={**sp, 'n': 3, "
        f"'sampling_seed': {SEED}}}, stream=True))\n"
        "    last = {}\n"
        "    for c in stream:\n"
        "        last[c['index']] = c['output_ids']\n"
        "    print(json.dumps({'many': [o['output_ids'] for o in many], 'again': [o['output_ids'] for o in again],\n"
        "                      'one': [o['output_ids'] for o in one], 'stream': [last[i] for i in range(3)]}))\n"
    )
    env = dict(os.environ)
    env.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    p = subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=800
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert len({tuple(x) for x in res["many"]}) == 3
    assert res["again"] == res["many"] == res["one"] == res["stream"]
