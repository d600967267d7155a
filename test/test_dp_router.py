"""Data parallel: ``--dp-size 2`` starts two replicas behind ``sglang-router`` (cache-aware policy).

A workload of 3 documents, each asked 4 questions in interleaved order, is sent once through the
cache-aware router and once (caches flushed) through a round-robin ``sglang-router`` over the
same two replicas. The prefix-cache hit rate, from each response's own ``cached_tokens`` /
``prompt_tokens``, must be higher with the cache-aware policy: it sends a repeated shared prefix
to the replica that holds it, while round-robin alternates replicas (3 documents on 2 replicas)
and misses once per document per replica.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from server_fixture import REPO, fake_env, make_fake_model_dir, sse_events

pytest.importorskip("sglang_router")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _free_run(n: int) -> int:
    """A port P with P .. P + n - 1 all free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + n >= 65535:
            continue
        ok = True
        for q in range(p, p + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise RuntimeError("no run of free ports")


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 600) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}"
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not healthy:\n{log.read_text(errors='replace')[-4000:]}")


def _workload() -> list[str]:
    rng = random.Random(7)
    words = "alpha beta gamma delta kernel cache page router block token prefix tensor expert".split()
    docs = [f"Document {k}: " + " ".join(rng.choice(words) for _ in range(220)) for k in range(3)]
    return [f"{docs[k]}\nQuestion {r}: what is item {r * 3 + k}?" for r in range(4) for k in range(3)]


def _hit_rate(url: str, prompts: list[str]) -> float:
    hit = total = 0
    for p in prompts:
        r = requests.post(
            url + "/generate",
            json={"text": p, "sampling_params": {"max_new_tokens": 1, "temperature": 0}},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        m = r.json()["meta_info"]
        hit += m["cached_tokens"]
        total += m["prompt_tokens"]
    return hit / total


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return int(proc.returncode)


def test_cache_aware_router_sends_a_shared_prefix_to_its_replica(tmp_path: Path) -> None:
    port = _free_run(3)
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "dp.log"
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--device", "cpu", "--dp-size", "2"]
    cmd += [
        "--port",
        str(port),
        "--page-size",
        "128",
        "--skip-server-warmup",
        "--router-policy",
        "cache_aware",
    ]
    with open(log, "wb") as f:
        dp = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=str(REPO), env=dict(os.environ))
    rr: subprocess.Popen | None = None
    try:
        _wait_healthy(url, dp, log)
        workers = [f"http://127.0.0.1:{port + 1}", f"http://127.0.0.1:{port + 2}"]
        for w in workers:  # what the router needs from a replica
            assert requests.get(w + "/get_model_info", timeout=10).json()["is_generation"] is True
            load = requests.get(w + "/get_load", timeout=10).json()
            assert load[0]["dp_rank"] == 0 and load[0]["num_reqs"] == 0
        prompts = _workload()
        aware = _hit_rate(url, prompts)
        assert requests.post(url + "/flush_cache", timeout=30).status_code == 200
        rr_port = _free_run(1)
        rr_log = tmp_path / "rr.log"
        with open(rr_log, "wb") as f:
            rr = subprocess.Popen(
                [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *workers]
                + ["--policy", "round_robin", "--host", "127.0.0.1", "--port", str(rr_port)]
                + ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_run(1))],
                stdout=f,
                stderr=subprocess.STDOUT,
            )
        _wait_healthy(f"http://127.0.0.1:{rr_port}", rr, rr_log)
        robin = _hit_rate(f"http://127.0.0.1:{rr_port}", prompts)
        print(
            f"\nprefix-cache hit rate over {len(prompts)} requests: cache_aware {aware:.3f}, round_robin {robin:.3f}"
        )
        assert aware > robin
        assert aware > 0.25  # 3 of every 4 requests of a document hit its cached block
    finally:
        if rr is not None:
            _stop(rr)
        code = _stop(dp)
    assert code == 0, log.read_text(errors="replace")[-4000:]


def test_dp_front_answers_models_as_one_server(tmp_path: Path) -> None:
    """``--dp-size 2`` over the model-free FakeScheduler: on the server's port, ``GET /v1/models``
    and ``/v1/models/{id}`` answer as a replica does, in Anthropic's shape for the ``anthropic``
    SDK (a request with ``anthropic-version``) and in OpenAI's with the served name otherwise;
    ``sglang-router`` itself answered OpenAI's shape with the model's path as id, and 404 for
    ``/v1/models/{id}``. Generation still goes through the router (streamed too); SIGTERM stops
    the whole group with exit code 0. Oracles: the ``anthropic`` / ``openai`` clients' parsers and
    a replica's own answers."""
    import anthropic
    import openai

    model = make_fake_model_dir(tmp_path / "model")
    port = _free_run(3)
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "dp.log"
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--model-path", str(model), "--dp-size", "2"]
    cmd += ["--port", str(port), "--api-key", "k3y"]
    with open(log, "wb") as f:
        dp = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=str(REPO), env=fake_env())
    try:
        _wait_healthy(url, dp, log, timeout_s=180)
        replica = f"http://127.0.0.1:{port + 1}"
        headers = {"x-api-key": "k3y", "anthropic-version": "2023-06-01"}
        client = anthropic.Anthropic(base_url=url, api_key="k3y", max_retries=0)
        (info,) = client.models.list().data
        assert (
            info.type == "model"
            and info.id == requests.get(replica + "/v1/models", headers=headers).json()["data"][0]["id"]
        )
        assert client.models.retrieve(info.id).id == info.id
        for path in ("/v1/models", f"/v1/models/{info.id}"):
            assert requests.get(url + path, headers=headers, timeout=10).json() == (
                requests.get(replica + path, headers=headers, timeout=10).json()
            )
        oa = openai.OpenAI(base_url=url + "/v1", api_key="k3y", max_retries=0)
        assert [m.id for m in oa.models.list().data] == [info.id]
        r = oa.chat.completions.create(
            model=info.id, messages=[{"role": "user", "content": "Hi"}], max_tokens=3
        )
        assert r.choices[0].finish_reason == "length"
        body = {"text": "Hello", "sampling_params": {"max_new_tokens": 3}, "stream": True}
        with requests.post(
            url + "/generate", json=body, headers={"authorization": "Bearer k3y"}, stream=True, timeout=60
        ) as s:
            events = sse_events(s)
        assert events[-1] == "[DONE]" and events[-2]["meta_info"]["finish_reason"]["type"] == "length"
    finally:
        code = _stop(dp)
    assert code == 0, log.read_text(errors="replace")[-4000:]
