"""SGLang's runtime-control routes on a running server: ``/pause_generation`` /
``/continue_generation``, ``/start_profile`` / ``/stop_profile``, ``/configure_logging``, and every
control route's answer to bad input. The weight routes on the real scheduler are in
``test_server_update_weights.py``.

Oracles: the model-free ``FakeScheduler`` (process wiring only; its output is ``FAKE_TEXT``'s
tokens): a request sent while paused must end after ``/continue_generation`` with the output an
unpaused request gets; a trace must load with ``gzip`` + ``json``; request log lines must appear in
the server log only while switched on.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from control_testutil import (
    HOLD,
    generate,
    in_thread,
    native_error,
    post,
    running_reqs,
    scheduler_steps,
    sse_events_rest,
)
from server_fixture import fake_env, make_fake_model_dir, start_server

pytestmark = pytest.mark.timeout(300)


# ============================================================================ pause / profile / log
@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory):
    """A fake-model server of this module's own: pausing must not reach other modules' servers."""
    root = tmp_path_factory.mktemp("control_fake")
    h = start_server(
        ["--model-path", str(make_fake_model_dir(root))],
        fake_env({"FAKE_STEP_SLEEP": "0.01", "FAKE_HOLD_ON_TEXT": HOLD}),
        root / "server.log",
    )
    yield h
    assert h.stop() == 0, h.log()[-3000:]


def test_request_sent_while_paused_completes_after_continue(fake_server) -> None:
    """``in_place`` and ``abort`` pauses: a request received while paused waits (it is not sent to
    the scheduler: nothing runs) and, after ``/continue_generation``, ends with the output of the
    same request on an unpaused server."""
    body = {"text": "paused one", "sampling_params": {"max_new_tokens": 5, "temperature": 0}}
    expected = generate(fake_server, body)
    for mode in ("in_place", "abort"):
        r = post(fake_server, "/pause_generation", {"mode": mode})
        assert r.status_code == 200 and r.json() == {
            "message": "Generation paused successfully.",
            "status": "ok",
        }
        t, box = in_thread(lambda: generate(fake_server, body))
        t.join(1.5)  # unpaused, this request takes ~50 ms
        assert t.is_alive() and running_reqs(fake_server) == 0, mode
        r = post(fake_server, "/continue_generation", {})
        assert r.json() == {"message": "Generation continued successfully.", "status": "ok"}
        t.join(60)
        out = box["out"]
        assert (out["text"], out["output_ids"]) == (expected["text"], expected["output_ids"]), mode


def test_client_gone_while_held_by_in_place_pause_never_runs(fake_server) -> None:
    """A request received during an ``in_place`` pause whose client goes away while it waits is
    dropped: ``/get_load`` counts no request, and after ``/continue_generation`` the scheduler
    runs no step for it (oracle: the requests the client really left sent, none)."""
    assert post(fake_server, "/pause_generation", {"mode": "in_place"}).status_code == 200
    try:
        body = {"text": "gone while paused", "sampling_params": {"max_new_tokens": 5}}
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(fake_server.url + "/generate", json=body, timeout=0.5)
        time.sleep(2.5)  # the gate looks at the connection every second
        load = requests.get(fake_server.url + "/get_load", timeout=10).json()
        assert load == [{"dp_rank": 0, "num_reqs": 0, "num_waiting_reqs": 0, "num_tokens": 0}]
        steps = scheduler_steps(fake_server)
    finally:
        assert post(fake_server, "/continue_generation").status_code == 200
    time.sleep(1.0)  # ~100 steps if it had been sent
    assert scheduler_steps(fake_server) == steps and running_reqs(fake_server) == 0


def test_pause_abort_ends_running_requests(fake_server) -> None:
    """``mode: abort`` (SGLang's default, also with no body): requests in flight are aborted and
    the call returns once they have ended; after continue the server serves again."""
    t, box = in_thread(
        lambda: generate(fake_server, {"text": f"{HOLD} x", "sampling_params": {"max_new_tokens": 400}})
    )
    deadline = time.time() + 30
    while running_reqs(fake_server) < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert post(fake_server, "/pause_generation").status_code == 200
    t.join(30)
    assert box["out"]["meta_info"]["finish_reason"]["type"] == "abort"
    assert running_reqs(fake_server) == 0
    assert post(fake_server, "/continue_generation").status_code == 200
    assert (
        generate(fake_server, {"text": "hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_health_generate_while_paused(fake_server) -> None:
    """Health probes during an RL weight sync (sgl-project/sglang#13320: the generating health
    check gets in the way of RL pauses): paused, ``/health_generate`` answers 200 at once, from the
    scheduler's answer to a control message, without running a step (it used to wait its 20 s
    for a token that cannot come and answer 503)."""
    for mode in ("in_place", "abort"):
        assert post(fake_server, "/pause_generation", {"mode": mode}).status_code == 200
        try:
            steps, t0 = scheduler_steps(fake_server), time.monotonic()
            r = requests.get(fake_server.url + "/health_generate", timeout=60)
            assert r.status_code == 200 and time.monotonic() - t0 < 10, (mode, r.text)
            assert requests.get(fake_server.url + "/health", timeout=10).status_code == 200
            assert scheduler_steps(fake_server) == steps, mode
        finally:
            assert post(fake_server, "/continue_generation").status_code == 200
    assert requests.get(fake_server.url + "/health_generate", timeout=60).status_code == 200


def test_pause_in_place_stops_and_resumes_a_running_stream(fake_server) -> None:
    """``mode: in_place``: a request already running gets no token while paused (the scheduler
    runs no step) and, after continue, finishes with all its tokens, in order."""
    n = 150
    body = {"text": "stream me", "sampling_params": {"max_new_tokens": n}, "stream": True}
    expected = generate(fake_server, {**body, "stream": False})["output_ids"]
    with requests.post(fake_server.url + "/generate", json=body, stream=True, timeout=120) as resp:
        lines = resp.iter_lines()
        next(lines)
        assert post(fake_server, "/pause_generation", {"mode": "in_place"}).status_code == 200
        steps = scheduler_steps(fake_server)
        time.sleep(1.0)  # ~100 steps when not paused
        assert scheduler_steps(fake_server) == steps and running_reqs(fake_server) == 1
        assert post(fake_server, "/continue_generation").status_code == 200
        events = sse_events_rest(lines)
    assert events[-1] == "[DONE]" and events[-2]["output_ids"] == expected


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/pause_generation", {"mode": "later"}, "mode"),
        ("/pause_generation", {"mode": "retract"}, "mode"),  # the fake scheduler cannot retract
        ("/pause_generation", [1], "JSON object"),
        ("/continue_generation", {"torch_empty_cache": "yes"}, "torch_empty_cache"),
        ("/get_weights_by_name", {}, "name"),
        ("/get_weights_by_name", {"name": "x", "truncate_size": -1}, "truncate_size"),
        ("/get_weights_by_name", {"name": "x", "truncate_size": "3"}, "truncate_size"),
        ("/start_profile", {"num_steps": 0}, "num_steps"),
        ("/start_profile", {"activities": ["MEM"]}, "activities"),
        ("/start_profile", {"activities": ["GPU"]}, "activities"),  # a CPU server
        ("/start_profile", {"start_step": 3}, "start_step"),
        ("/start_profile", {"output_dir": 5}, "output_dir"),
        ("/start_profile", {"profile_id": "a/b"}, "profile_id"),  # refused at start, not at stop
        ("/start_profile", {"profile_id": ".."}, "profile_id"),
        ("/stop_profile", None, "not in progress"),
        ("/configure_logging", {"log_requests_level": 7}, "log_requests_level"),
        ("/configure_logging", {"log_requests": "on"}, "log_requests"),
        ("/configure_logging", {"log_requests_format": "xml"}, "log_requests_format"),
        ("/configure_logging", {"log_level": "loud"}, "log_level"),
        ("/configure_logging", {"dump_requests_folder": "/x"}, "dump_requests_folder"),
    ],
)
def test_bad_control_input_is_a_400_and_changes_nothing(
    fake_server, path: str, body: Any, field: str
) -> None:
    """Each bad body: a 400 in the native error shape naming the field; the server is then not
    paused, not profiling, and serves as before."""
    native_error(post(fake_server, path, body), field)
    assert running_reqs(fake_server) == 0
    out = generate(fake_server, {"text": "still here", "sampling_params": {"max_new_tokens": 2}})
    assert out["meta_info"]["completion_tokens"] == 2  # not paused: it did not wait
    native_error(post(fake_server, "/stop_profile"), "not in progress")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "model_path"),
        ({"model_path": 3}, "model_path"),
        ({"model_path": "/nonexistent/ckpt"}, "model_path"),
        ({"model_path": ".", "load_format": "gguf"}, "load_format"),
        ({"model_path": ".", "abort_all_requests": "yes"}, "abort_all_requests"),
        ({"model_path": ".", "is_async": True}, "is_async"),
        ({"model_path": ".", "flush_cache": False}, "flush_cache"),
    ],
)
def test_update_weights_bad_body(fake_server, body: dict[str, Any], field: str) -> None:
    """A bad ``/update_weights_from_disk`` body: 400 with SGLang's ``success: false`` answer and
    the native error object, both naming the field."""
    r = post(fake_server, "/update_weights_from_disk", body)
    msg = native_error(r, field)
    assert (
        r.json()["success"] is False and r.json()["message"] == msg and r.json()["num_paused_requests"] == 0
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/pause_generation", {"mode": "later", "future_flag": 1}, "mode"),
        ("/continue_generation", {"torch_empty_cache": "yes", "future_flag": 1}, "torch_empty_cache"),
        ("/update_weights_from_disk", {"model_path": "/nonexistent/ckpt", "future_flag": 1}, "model_path"),
        ("/get_weights_by_name", {"truncate_size": 3, "future_flag": 1}, "name"),
        ("/start_profile", {"num_steps": 0, "future_flag": 1}, "num_steps"),
        ("/configure_logging", {"log_level": "loud", "future_flag": 1}, "log_level"),
        ("/abort_request", {"rid": 5, "future_flag": 1}, "rid"),
    ],
)
def test_unknown_control_field_next_to_a_bad_one(fake_server, path: str, body: Any, field: str) -> None:
    """An unknown field is ignored, as SGLang's request structs ignore it: a bad value beside it
    is still the 400, naming the bad field and not the unknown one."""
    msg = native_error(post(fake_server, path, body), field)
    assert "future_flag" not in msg


def test_unknown_control_fields_are_ignored(fake_server) -> None:
    """Control calls carrying fields of a later SGLang version do what they do without them
    (SGLang ignores undeclared fields), and the server log names the ignored fields."""
    extra = {"future_flag": True, "future_opts": {"a": 1}}
    assert post(fake_server, "/configure_logging", {"log_requests": False, **extra}).status_code == 200
    assert post(fake_server, "/abort_request", {"rid": "no-such-request", **extra}).status_code == 200
    # SGLang's AbortReq fields are Optional: null is the default, not a wrong type
    assert post(fake_server, "/abort_request", {"rid": None, "abort_all": None}).status_code == 200
    r = post(fake_server, "/pause_generation", {"mode": "in_place", **extra})
    assert r.json() == {"message": "Generation paused successfully.", "status": "ok"}
    t, box = in_thread(
        lambda: generate(fake_server, {"text": "after", "sampling_params": {"max_new_tokens": 2}})
    )
    t.join(1.0)
    assert t.is_alive()  # paused: the mode was read beside the unknown fields
    r = post(fake_server, "/continue_generation", {"torch_empty_cache": False, **extra})
    assert r.json() == {"message": "Generation continued successfully.", "status": "ok"}
    t.join(60)
    assert box["out"]["meta_info"]["completion_tokens"] == 2
    warned = [line for line in fake_server.log().splitlines() if "ignored unknown field" in line]
    for route in ("/configure_logging", "/abort_request", "/pause_generation", "/continue_generation"):
        assert any(route in line and "future_opts" in line for line in warned), (route, warned[-4:])


def test_profile_writes_a_trace_that_loads(fake_server, tmp_path: Path) -> None:
    """``/start_profile`` -> requests -> ``/stop_profile``: a gzip Chrome trace named
    ``<profile_id>-TP-0.trace.json.gz`` in ``output_dir`` that ``json`` loads, holding the
    scheduler steps; a second start while profiling is a 400. With ``num_steps`` the profile
    stops by itself."""
    out_dir = tmp_path / "traces"
    r = post(fake_server, "/start_profile", {"output_dir": str(out_dir), "profile_id": "p1"})
    assert r.status_code == 200 and r.text == "Start profiling.\n"
    native_error(post(fake_server, "/start_profile", {"output_dir": str(out_dir)}), "already in progress")
    generate(fake_server, {"text": "profile me", "sampling_params": {"max_new_tokens": 4}})
    assert post(fake_server, "/stop_profile").status_code == 200
    trace = json.load(gzip.open(out_dir / "p1-TP-0.trace.json.gz"))
    names = {e.get("name") for e in trace["traceEvents"]}
    assert "scheduler_step" in names

    r = post(fake_server, "/start_profile", {"output_dir": str(out_dir), "profile_id": "p2", "num_steps": 2})
    assert r.status_code == 200
    generate(fake_server, {"text": "two steps", "sampling_params": {"max_new_tokens": 6}})
    path = out_dir / "p2-TP-0.trace.json.gz"
    # the scheduler logs the path once the trace is written whole (the file exists, partly
    # written, while it is being compressed into place)
    done = f"Traces are saved to: {path}"
    deadline = time.time() + 60
    while done not in fake_server.log() and time.time() < deadline:
        time.sleep(0.1)
    assert done in fake_server.log(), fake_server.log()[-3000:]
    steps = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("name") == "scheduler_step"]
    assert len(steps) == 2
    native_error(post(fake_server, "/stop_profile"), "not in progress")


def test_configure_logging_toggles_request_lines(fake_server) -> None:
    """``log_requests`` on: a ``Receive:`` line per request in the server log, with the sampling
    parameters at level 1 and not at level 0; off again: no line."""

    def run(rid: str) -> None:
        generate(fake_server, {"text": "log me", "rid": rid, "sampling_params": {"max_new_tokens": 2}})

    def lines(rid: str) -> list[str]:
        time.sleep(0.3)  # the log is written by the server process
        return [ln for ln in fake_server.log().splitlines() if f"rid={rid!r}" in ln or f"rid={rid}" in ln]

    run("quiet-1")
    assert lines("quiet-1") == []
    assert (
        post(fake_server, "/configure_logging", {"log_requests": True, "log_requests_level": 1}).status_code
        == 200
    )
    run("loud-1")
    got = lines("loud-1")
    assert any("Receive:" in ln and "max_new_tokens" in ln for ln in got), got
    assert post(fake_server, "/configure_logging", {"log_requests_level": 0}).status_code == 200
    run("loud-0")
    got = lines("loud-0")
    assert got and all("max_new_tokens" not in ln for ln in got), got
    assert post(fake_server, "/configure_logging", {"log_requests": False}).status_code == 200
    run("quiet-2")
    assert lines("quiet-2") == []
    info = requests.get(fake_server.url + "/get_server_info", timeout=10).json()
    assert (info["log_requests"], info["log_requests_level"]) == (False, 0)
