"""The server on CUDA (``--device cuda``, default model, bf16): the scheduler process initializes
CUDA after ``spawn``, serves greedy requests identically alone and 8 at a time, streams, and
returns every KV page after an abort."""

from __future__ import annotations

import concurrent.futures as cf
import os
import time

import pytest
import requests
from server_fixture import REPO, sse_events, start_server

torch = pytest.importorskip("torch")
pytest.importorskip("sglang_v4.managers.scheduler")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.timeout(600),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    env = dict(os.environ)
    env.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "test"), env.get("PYTHONPATH", "")])
    h = start_server(["--device", "cuda"], env, tmp_path_factory.mktemp("gpu") / "server.log", timeout_s=400)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


def _gen(h, body):
    r = requests.post(h.url + "/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_cuda_server(server):
    info = requests.get(server.url + "/server_info", timeout=60).json()
    assert info["device"].startswith("cuda")
    prompts = [f"Request number {i}:" + " more" * i for i in range(8)]
    sp = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
    alone = [_gen(server, {"text": p, "sampling_params": sp})["output_ids"] for p in prompts]
    with cf.ThreadPoolExecutor(8) as ex:
        together = [
            o["output_ids"]
            for o in ex.map(lambda p: _gen(server, {"text": p, "sampling_params": sp}), prompts)
        ]
    assert together == alone
    with requests.post(
        server.url + "/generate",
        json={"text": prompts[0], "sampling_params": sp, "stream": True},
        stream=True,
        timeout=300,
    ) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]" and events[-2]["output_ids"] == alone[0]

    def flush() -> None:
        deadline = time.time() + 60
        while requests.post(server.url + "/flush_cache", timeout=60).status_code != 200:
            assert time.time() < deadline
            time.sleep(0.2)

    flush()
    idle = requests.get(server.url + "/server_info", timeout=60).json()["kv_pool"]
    body = {
        "text": prompts[1],
        "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True},
        "stream": True,
    }
    r = requests.post(server.url + "/generate", json=body, stream=True, timeout=300)
    n = 0
    for line in r.iter_lines():
        n += bool(line)
        if n >= 5:
            break
    r.close()
    flush()
    assert requests.get(server.url + "/server_info", timeout=60).json()["kv_pool"] == idle
