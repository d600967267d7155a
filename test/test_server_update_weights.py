"""SGLang's weight routes on a running server with the real scheduler: ``/update_weights_from_disk``
and ``/get_weights_by_name`` (with pauses, aborts and flushes around them, tensor parallelism, and
the offline ``Engine``'s methods of the same names).

Oracles: the embedded tiny model is updated to a checkpoint written by ``tools/make_checkpoint``
with other weights; greedy outputs then equal those of a fresh server launched on that checkpoint
(a cold run), and ``/get_weights_by_name`` equals ``safetensors``' own read of the file. The
pause, profile and logging routes are in ``test_server_control_routes.py``.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from control_testutil import (
    generate,
    in_thread,
    native_error,
    post,
    running_reqs,
    sse_events_rest,
)
from server_fixture import ServerHandle, real_env, start_server

pytestmark = pytest.mark.timeout(300)


PROMPTS = ["The capital of France is", "1, 2, 3, 4,", "def fibonacci(n):"]
LONG = "DeepSeek-V4 caches compressed KV in blocks of 256 tokens. " * 30  # more than one block


def _greedy(server: ServerHandle, prompt: str, n: int = 6) -> dict[str, Any]:
    return generate(server, {"text": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0}})


@pytest.fixture(scope="module")
def new_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The embedded model's architecture (``tiny``, HF names, fp32) with other weights (seed 7)."""
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    return write_checkpoint(str(tmp_path_factory.mktemp("seed7") / "ckpt"), "tiny", "hf", "fp32", seed=7)


@pytest.fixture(scope="module")
def cold_start(new_ckpt: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[ServerHandle]]:
    """The start of a fresh server on ``new_ckpt`` (the cold-run oracle of :func:`cold_outputs`),
    begun in a thread so that it overlaps :func:`real_server`'s start."""
    log = tmp_path_factory.mktemp("cold") / "server.log"
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(start_server, ["--model-path", new_ckpt], real_env(), log, timeout_s=300)
        try:
            yield fut
        finally:
            if fut.exception() is None:
                fut.result().stop()  # already stopped by cold_outputs unless that failed


@pytest.fixture(scope="module")
def real_server(
    default_model_dir: str, cold_start: Future[ServerHandle], tmp_path_factory: pytest.TempPathFactory
):
    h = start_server([], real_env(), tmp_path_factory.mktemp("control_real") / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="module")
def cold_outputs(cold_start: Future[ServerHandle]) -> dict[str, list[int]]:
    """Greedy outputs of a fresh server launched on ``new_ckpt`` (the cold-run oracle); the
    server is stopped once they are read."""
    h = cold_start.result()
    try:
        return {p: _greedy(h, p)["output_ids"] for p in [*PROMPTS, LONG]}
    finally:
        assert h.stop() == 0, h.log()[-3000:]


def _safetensors_rows(ckpt: str, name: str, n: int) -> list[Any]:
    import glob

    from safetensors import safe_open

    for f in glob.glob(f"{ckpt}/*.safetensors"):
        with safe_open(f, framework="pt") as st:
            if name in st.keys():
                return st.get_tensor(name)[:n].float().tolist()
    raise KeyError(name)


WEIGHT_NAMES = [
    ("model.norm.weight", 5),
    ("model.embed_tokens.weight", 2),
    ("model.layers.1.self_attn.q_a_proj.weight", 3),
    ("model.layers.2.mlp.experts.gate_up_proj", 1),
]


def _mismatched_ckpts(new_ckpt: str, root: Path) -> dict[str, Path]:
    """Two checkpoints the served model cannot load: another ``hidden_size`` in ``config.json``,
    and the right config with one tensor missing from the safetensors file."""
    import shutil

    from safetensors.torch import load_file, save_file

    out = {}
    cfg = root / "other-config"
    shutil.copytree(new_ckpt, cfg)
    d = json.loads((cfg / "config.json").read_text())
    d["hidden_size"] = 256
    (cfg / "config.json").write_text(json.dumps(d))
    out["hidden_size"] = cfg
    miss = root / "missing-tensor"
    miss.mkdir()
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(new_ckpt) / f, miss / f)
    (src,) = Path(new_ckpt).glob("*.safetensors")
    tensors = load_file(str(src))
    del tensors["model.norm.weight"]
    save_file(tensors, str(miss / "model.safetensors"))
    out["model.norm.weight"] = miss
    return out


def test_update_weights_from_disk_matches_a_cold_run(real_server, new_ckpt, cold_outputs, tmp_path) -> None:
    """Before: the embedded weights (``/get_weights_by_name`` = the default checkpoint's file), a
    prefix-cache hit on a repeated long prompt. A mismatched config or checkpoint: 400
    ``success: false`` naming the field / tensor, old weights still served. The update: 200,
    ``weight_version`` reported, the radix cache emptied (no hit on the long prompt), greedy
    outputs equal to the cold run on the new checkpoint, the parameters equal to its file."""
    from sglang_v4.tools.default_model import ensure_default_model

    old_dir = ensure_default_model()
    for name, n in WEIGHT_NAMES:
        r = post(real_server, "/get_weights_by_name", {"name": name, "truncate_size": n})
        assert r.status_code == 200 and r.json() == _safetensors_rows(old_dir, name, n), name
    before = {p: _greedy(real_server, p)["output_ids"] for p in PROMPTS}
    assert before != {p: cold_outputs[p] for p in PROMPTS}  # the new weights do change the outputs
    _greedy(real_server, LONG)
    assert _greedy(real_server, LONG)["meta_info"]["cached_tokens"] >= 256

    for field, path in _mismatched_ckpts(new_ckpt, tmp_path).items():
        r = post(real_server, "/update_weights_from_disk", {"model_path": str(path), "weight_version": "bad"})
        assert r.status_code == 400 and r.json()["success"] is False and field in r.json()["message"], r.text
        assert {p: _greedy(real_server, p)["output_ids"] for p in PROMPTS} == before
        assert (
            requests.get(real_server.url + "/get_model_info", timeout=10).json()["weight_version"]
            == "default"
        )

    r = post(real_server, "/update_weights_from_disk", {"model_path": new_ckpt, "weight_version": "step-7"})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "success": True,
        "message": "Succeeded to update model weights. Weight version updated to step-7.",
        "num_paused_requests": 0,
    }
    info = requests.get(real_server.url + "/get_server_info", timeout=10).json()
    assert info["radix_cache"]["cached_blocks"] == 0 and info["weight_version"] == "step-7"
    model_info = requests.get(real_server.url + "/get_model_info", timeout=10).json()
    assert (model_info["weight_version"], model_info["model_path"]) == ("step-7", new_ckpt)
    long_out = _greedy(real_server, LONG)
    assert long_out["meta_info"]["cached_tokens"] == 0 and long_out["output_ids"] == cold_outputs[LONG]
    for p in PROMPTS:
        out = _greedy(real_server, p)
        assert out["output_ids"] == cold_outputs[p] and out["meta_info"]["weight_version"] == "step-7", p
    for name, n in WEIGHT_NAMES:
        r = post(real_server, "/get_weights_by_name", {"name": name, "truncate_size": n})
        assert r.json() == _safetensors_rows(new_ckpt, name, n), name
    native_error(post(real_server, "/get_weights_by_name", {"name": "model.layers.99.x"}), "name")


def test_update_waits_for_running_requests_or_aborts_them(real_server, new_ckpt, cold_outputs) -> None:
    """A request running when the update arrives finishes first, on the weights it started with
    (its output equals an unhurried run before the update); with ``abort_all_requests`` it is
    aborted instead. The model is already on ``new_ckpt`` (test order), so a reload of it changes
    no output."""
    prompt = PROMPTS[0]
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 40, "temperature": 0}, "stream": True}
    alone = generate(real_server, {**body, "stream": False})["output_ids"]
    for abort in (False, True):
        if abort:  # long enough to be running when the abort comes, however slow the machine
            body["sampling_params"]["max_new_tokens"] = 2000
        with requests.post(real_server.url + "/generate", json=body, stream=True, timeout=120) as resp:
            lines = resp.iter_lines()
            next(lines)
            t, box = in_thread(
                lambda a=abort: post(
                    real_server,
                    "/update_weights_from_disk",
                    {"model_path": new_ckpt, "abort_all_requests": a},
                )
            )
            events = sse_events_rest(lines)
        t.join(120)
        assert box["out"].status_code == 200, box["out"].text
        last = events[-2]
        if abort:
            assert last["meta_info"]["finish_reason"]["type"] == "abort"
        else:
            assert last["output_ids"] == alone
    assert _greedy(real_server, PROMPTS[1])["output_ids"] == cold_outputs[PROMPTS[1]]


def test_update_while_paused(real_server, new_ckpt, cold_outputs) -> None:
    """Paused ``in_place`` with a request holding KV: the update is refused (400, nothing
    changes). Paused with ``retract``: the request gives its KV back, the update runs at once and,
    after continue, the request finishes with all its tokens."""
    body = {"text": PROMPTS[2], "sampling_params": {"max_new_tokens": 60, "temperature": 0}, "stream": True}
    for mode in ("in_place", "retract"):
        with requests.post(real_server.url + "/generate", json=body, stream=True, timeout=120) as resp:
            lines = resp.iter_lines()
            next(lines)
            assert post(real_server, "/pause_generation", {"mode": mode}).status_code == 200
            r = post(real_server, "/update_weights_from_disk", {"model_path": new_ckpt})
            if mode == "in_place":
                assert r.status_code == 400 and "hold KV" in r.json()["message"], r.text
            else:
                assert r.status_code == 200, r.text
            assert post(real_server, "/continue_generation").status_code == 200
            events = sse_events_rest(lines)
        last = events[-2]
        assert last["meta_info"]["completion_tokens"] == 60 and len(last["output_ids"]) == 60, mode
    assert _greedy(real_server, PROMPTS[0])["output_ids"] == cold_outputs[PROMPTS[0]]


def _kv_all_free(server: ServerHandle) -> bool:
    """Whether every entry of every KV pool is free (``/get_server_info``'s ``kv_pool``)."""
    pool = requests.get(server.url + "/get_server_info", timeout=10).json()["kv_pool"]
    return all(v["free"] == v["total"] for v in pool.values())


def test_abort_while_paused_in_place_answers_and_frees(real_server, new_ckpt, cold_outputs) -> None:
    """sgl-project/sglang#12099 (an update with ``abort_all_requests`` failing because aborted
    requests still held the cache): paused ``in_place``, a request aborted by rid ends at once with
    ``finish_reason`` abort (not only after continue), and an update with ``abort_all_requests``
    aborts the other one and succeeds (the batch in flight at the pause no longer blocks it); every
    KV page is free again, and greedy outputs are the cold run's."""
    body = {"text": PROMPTS[1], "sampling_params": {"max_new_tokens": 2000}, "stream": False}
    a, box_a = in_thread(lambda: generate(real_server, {**body, "rid": "paused-abort-a"}))
    b, box_b = in_thread(lambda: generate(real_server, {**body, "rid": "paused-abort-b"}))
    deadline = time.time() + 30
    while running_reqs(real_server) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert post(real_server, "/pause_generation", {"mode": "in_place"}).status_code == 200
    try:
        assert post(real_server, "/abort_request", {"rid": "paused-abort-a"}).status_code == 200
        a.join(30)
        assert not a.is_alive() and box_a["out"]["meta_info"]["finish_reason"]["type"] == "abort"
        r = post(
            real_server, "/update_weights_from_disk", {"model_path": new_ckpt, "abort_all_requests": True}
        )
        assert r.status_code == 200 and r.json()["success"] is True, r.text
        b.join(30)
        assert not b.is_alive() and box_b["out"]["meta_info"]["finish_reason"]["type"] == "abort"
        assert _kv_all_free(real_server)  # the update flushed the cache; nothing else holds KV
    finally:
        assert post(real_server, "/continue_generation").status_code == 200
    assert _greedy(real_server, PROMPTS[0])["output_ids"] == cold_outputs[PROMPTS[0]]


def test_flush_cache_while_paused_retract(real_server) -> None:
    """sgl-project/sglang#33783 (retract leaves the prefix in the radix cache, and ``/flush_cache``
    is refused because the retracted requests are queued): paused ``retract``, ``/flush_cache``
    succeeds, every KV page is free, and after continue the retracted request ends with the
    output of the same request run unpaused."""
    body = {"text": LONG + " x", "sampling_params": {"max_new_tokens": 60, "temperature": 0}}
    alone = generate(real_server, body)["output_ids"]
    assert (
        requests.get(real_server.url + "/get_server_info", timeout=10).json()["radix_cache"]["cached_blocks"]
        > 0
    )
    with requests.post(
        real_server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=120
    ) as resp:
        lines = resp.iter_lines()
        next(lines)
        assert post(real_server, "/pause_generation", {"mode": "retract"}).status_code == 200
        try:
            r = post(real_server, "/flush_cache")
            assert r.status_code == 200, r.text
            assert _kv_all_free(real_server)
        finally:
            assert post(real_server, "/continue_generation").status_code == 200
        events = sse_events_rest(lines)
    assert events[-2]["output_ids"] == alone


def test_repeated_updates_keep_memory_flat(real_server, new_ckpt, default_model_dir) -> None:
    """20 ``/update_weights_from_disk`` calls (alternating two checkpoints, a generation after
    each) leave the KV pool as they found it and grow the server's resident memory (all its
    processes, ``psutil``) by less than half a copy of the weights: no copy of a checkpoint is
    kept per update (sgl-project/sglang#4446 leaked one per update)."""
    import psutil

    def rss() -> int:
        root = psutil.Process(real_server.proc.pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])

    weight_bytes = sum(f.stat().st_size for f in Path(new_ckpt).glob("*.safetensors"))
    paths = [default_model_dir, new_ckpt]
    for p in paths:  # warm-up: allocator and page-cache steady state
        assert post(real_server, "/update_weights_from_disk", {"model_path": p}).status_code == 200
    before = rss()
    for i in range(20):
        r = post(real_server, "/update_weights_from_disk", {"model_path": paths[i % 2]})
        assert r.status_code == 200, r.text
        _greedy(real_server, PROMPTS[i % 3], 2)
    assert post(real_server, "/flush_cache").status_code == 200
    assert _kv_all_free(real_server)
    assert rss() - before < weight_bytes // 2, (before, rss(), weight_bytes)


@pytest.mark.slow
def test_engine_weight_methods(new_ckpt, cold_outputs, tmp_path) -> None:
    """The offline ``Engine``: ``update_weights_from_disk`` returns SGLang's tuple and then
    generates as the cold run; ``get_weights_by_name`` equals the file; a mismatched checkpoint is
    ``(False, message, 0)``; bad fields raise ``ValueError``; the profiler writes its trace."""
    from sglang_v4 import Engine

    with Engine(device="cpu") as engine:
        bad = _mismatched_ckpts(new_ckpt, tmp_path)["hidden_size"]
        ok, msg, paused = engine.update_weights_from_disk(str(bad))
        assert (ok, paused) == (False, 0) and "hidden_size" in msg
        assert engine.update_weights_from_disk(new_ckpt) == (True, "Succeeded to update model weights.", 0)
        out = engine.generate(prompt=PROMPTS[0], sampling_params={"max_new_tokens": 6, "temperature": 0})
        assert out["output_ids"] == cold_outputs[PROMPTS[0]]
        name, n = WEIGHT_NAMES[2]
        assert engine.get_weights_by_name(name, n) == _safetensors_rows(new_ckpt, name, n)
        with pytest.raises(ValueError, match="name"):
            engine.get_weights_by_name("nope")
        with pytest.raises(ValueError, match="load_format"):
            engine.update_weights_from_disk(new_ckpt, load_format="gguf")
        engine.start_profile(output_dir=str(tmp_path / "tr"), profile_id="e")
        engine.generate(prompt="x", sampling_params={"max_new_tokens": 2})
        engine.stop_profile()
        assert json.load(gzip.open(tmp_path / "tr" / "e-TP-0.trace.json.gz"))["traceEvents"]
        with pytest.raises(ValueError, match="not in progress"):
            engine.stop_profile()


@pytest.mark.slow
def test_tp2_update_reaches_every_rank(new_ckpt, cold_outputs, tmp_path) -> None:
    """``--tp-size 2`` (gloo on CPU): the update reloads both ranks' shards, so greedy outputs equal
    the one-rank cold run on the new checkpoint (``test_tp_server``: TP 2 answers as TP 1); a
    replicated parameter reads back as the file; a parameter split over the ranks is a 400."""
    h = start_server(
        ["--device", "cpu", "--tp-size", "2"], real_env(), tmp_path / "server.log", timeout_s=600
    )
    try:
        r = post(h, "/update_weights_from_disk", {"model_path": new_ckpt, "weight_version": "tp"})
        assert r.status_code == 200 and r.json()["success"], r.text
        for p in PROMPTS:
            assert _greedy(h, p)["output_ids"] == cold_outputs[p], p
        name, n = WEIGHT_NAMES[0]
        assert post(
            h, "/get_weights_by_name", {"name": name, "truncate_size": n}
        ).json() == _safetensors_rows(new_ckpt, name, n)
        native_error(post(h, "/get_weights_by_name", {"name": WEIGHT_NAMES[3][0]}), "tensor-parallel")
        bad = _mismatched_ckpts(new_ckpt, tmp_path)["model.norm.weight"]
        assert post(h, "/update_weights_from_disk", {"model_path": str(bad)}).status_code == 400
        assert _greedy(h, PROMPTS[0])["output_ids"] == cold_outputs[PROMPTS[0]]
    finally:
        assert h.stop() == 0, h.log()[-3000:]
