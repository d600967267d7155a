"""First impressions: a bad ``--model-path`` gets one clear line and exit code 1.

A directory without ``config.json``, a Hugging Face hub id where a directory is expected, a file,
a directory without weights or without tokenizer files: each prints one log line saying what is
expected and how to make a model directory (``python -m sglang_v4.tools.make_checkpoint``), with
no traceback and no tokenizer red herring, before any child process loads the model. The ``Engine`` raises
the same message as a ``ValueError``.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from server_fixture import REPO, free_port, make_fake_model_dir

pytestmark = pytest.mark.timeout(300)


def _launch(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "sglang_v4.launch_server", "--port", str(free_port()), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _one_line(p: subprocess.CompletedProcess[str]) -> str:
    out = (p.stdout + p.stderr).strip().splitlines()
    assert p.returncode == 1, p.stdout + p.stderr
    assert len(out) == 1, "\n".join(out)
    assert "Traceback" not in out[0]
    return out[0]


def test_directory_without_config_json(tmp_path: Path) -> None:
    d = tmp_path / "empty"
    d.mkdir()
    line = _one_line(_launch(["--model-path", str(d)], tmp_path))
    assert f"model_path: '{d}' has no config.json" in line
    assert "python -m sglang_v4.tools.make_checkpoint DIR --preset tiny" in line
    assert "tokenizer" not in line.split("(")[0]  # the cause, not a tokenizer red herring


def test_hub_id_where_a_directory_is_expected(tmp_path: Path) -> None:
    """The download command the line suggests is one the installed ``huggingface_hub`` provides
    (oracle: its console scripts; version 1.0 removed ``huggingface-cli`` for ``hf``)."""
    line = _one_line(_launch(["--model-path", "deepseek-ai/DeepSeek-V4-Flash"], tmp_path))
    assert "'deepseek-ai/DeepSeek-V4-Flash' is not a local directory" in line
    m = re.search(r"Download it first \((\S+) download deepseek-ai/DeepSeek-V4-Flash --local-dir DIR\)", line)
    assert m is not None, line
    hub_scripts = {
        ep.name
        for ep in importlib.metadata.distribution("huggingface_hub").entry_points
        if ep.group == "console_scripts"
    }
    assert m.group(1) in hub_scripts, (m.group(1), hub_scripts)
    assert "sglang_v4.tools.make_checkpoint" in line


# each case launches a child that loads the model config first (~20-40 s on two cores): the missing
# tokenizer case, the slowest, is in the slow tier
@pytest.mark.parametrize(
    "case", ["file", "no_weights", pytest.param("no_tokenizer", marks=pytest.mark.slow), "other_model"]
)
def test_other_bad_directories(tmp_path: Path, case: str) -> None:
    d = make_fake_model_dir(tmp_path)  # config.json, tokenizer files, an empty model.safetensors
    args = ["--model-path", str(d)]
    if case == "file":
        args = ["--model-path", str(d / "config.json")]
        want = "is a file; expected a Hugging Face-layout model directory"
    elif case == "no_weights":
        (d / "model.safetensors").unlink()
        want = "has no *.safetensors weights (use --load-format dummy for random weights)"
    elif case == "no_tokenizer":
        for f in ("tokenizer.json", "tokenizer_config.json"):
            (d / f).unlink()
        want = "tokenizer_path: "
    else:
        (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
        want = "has model_type 'llama'; sglang-v4 serves DeepSeek-V4 models"
    assert want in _one_line(_launch(args, tmp_path))


def test_engine_raises_the_same_message(tmp_path: Path) -> None:
    from sglang_v4 import Engine

    with pytest.raises(ValueError, match="has no config.json; expected a Hugging Face-layout"):
        Engine(model_path=str(tmp_path))


# --- bind errors, flag names, a small --context-length -------------------------------------


def _cli_error(args: list[str], cwd: Path) -> str:
    """The last stderr line of a launch refused by argparse (exit 2)."""
    p = _launch(args, cwd)
    assert p.returncode == 2, (p.returncode, (p.stdout + p.stderr)[-2000:])
    return p.stderr.strip().splitlines()[-1]


def test_port_in_use_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        line = _one_line(_launch(["--host", "127.0.0.1", "--port", str(port)], tmp_path))
    assert f"port: 127.0.0.1:{port} is already in use" in line
    assert "--port" in line  # the line says what to do, not only what is wrong


def test_unresolvable_host_is_named_not_blamed_on_the_port(tmp_path: Path) -> None:
    # "999.1.1.1" is no address and no name (getaddrinfo fails); the port is free.
    line = _one_line(_launch(["--host", "999.1.1.1"], tmp_path))
    assert "host: cannot resolve '999.1.1.1'" in line
    assert "already in use" not in line


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6 in this Python")
def test_ipv6_host_can_be_bound() -> None:
    from sglang_v4.utils import is_port_available

    try:  # the oracle: a plain IPv6 socket binds ::1 on a free port
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
            port = s.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    assert is_port_available("::1", port)  # was False: the check bound an IPv4 socket only

    from sglang_v4.utils import bind_error

    assert bind_error("::1", port) is None


@pytest.mark.parametrize(
    "args, flag, field",
    [
        (["--tp-size", "0"], "--tp-size", "tp_size must be a positive integer (got 0)"),
        (["--tensor-parallel-size", "2", "--ep-size", "3"], "--ep-size", "ep_size must divide tp_size"),
        (["--page-size", "100"], "--page-size", "page_size must be a positive multiple of 128"),
        (["--context-length", "1"], "--context-length", "context_length must be at least 2"),
    ],
)
def test_bad_flag_value_names_the_flag(tmp_path: Path, args: list[str], flag: str, field: str) -> None:
    line = _cli_error(args, tmp_path)
    assert f"error: argument {flag}: {field}" in line, line


def test_flag_error_message_leaves_other_messages_alone() -> None:
    import argparse

    from sglang_v4.launch_server import flag_error_message
    from sglang_v4.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    assert flag_error_message(parser, "device='cuda' was requested") == "device='cuda' was requested"
    assert (
        flag_error_message(parser, "dp_size > 1 runs replicas")
        == "argument --dp-size: dp_size > 1 runs replicas"
    )


def test_small_context_length_starts_and_serves(tmp_path: Path) -> None:
    """``--context-length 4``: the start-up generation fits the context (it used to ask for its
    6-token prompt plus 8 tokens and the server exited), and requests are checked against 4."""
    import requests
    from server_fixture import fake_env, start_server

    h = start_server(["--context-length", "4"], fake_env(), tmp_path / "server.log")
    try:
        assert "ready to roll" in h.log()
        ok = requests.post(
            h.url + "/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}}
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["meta_info"]["completion_tokens"] == 2
        big = requests.post(
            h.url + "/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}}
        )
        assert big.status_code == 400
        assert "maximum context length is 4 tokens" in big.json()["error"]["message"]
        assert requests.get(h.url + "/health").status_code == 200
    finally:
        assert h.stop() == 0


@pytest.mark.slow  # a whole server start for a flag handed to uvicorn
def test_https_with_sglangs_ssl_flags(tmp_path: Path) -> None:
    """``--ssl-certfile`` / ``--ssl-keyfile`` (SGLang's flags, handed to uvicorn): the server
    answers HTTPS with that certificate (verified by ``requests`` against it) and plain HTTP gets no
    answer (a key without its certificate: ``test_sglang_flags``)."""
    import shutil

    import requests
    from server_fixture import fake_env, start_server

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    args = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--skip-server-warmup"]
    h = start_server(args, fake_env(), tmp_path / "server.log", https_ca=str(cert))
    try:
        assert h.url.startswith("https://")
        r = requests.post(
            h.url + "/generate",
            json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2}},
            verify=str(cert),
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 2
        with pytest.raises(requests.ConnectionError):
            requests.get(h.url.replace("https://", "http://") + "/health", timeout=5)
        info = requests.get(h.url + "/get_server_info", verify=str(cert), timeout=30).json()
        assert info["ssl_certfile"] == str(cert)
    finally:
        assert h.stop() == 0


def test_logging_survives_a_replaced_and_closed_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's log handler writes to the ``sys.stdout`` of each record, so a stdout that was
    current when logging was configured and has been closed since (a redirect, a test capture: it
    happened when ``launch_server``'s ``main`` ran inside a captured test) does not turn later
    lines into "--- Logging error ---" tracebacks."""
    import io
    import logging

    from sglang_v4.utils import configure_logging

    saved = logging.getLogger().handlers[:], logging.getLogger().level
    first, second, err = io.StringIO(), io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stdout", first)
        monkeypatch.setattr(sys, "stderr", err)
        configure_logging("info")
        first.close()
        monkeypatch.setattr(sys, "stdout", second)
        logging.getLogger("sglang_v4.test").warning("after the redirect")
        assert "after the redirect" in second.getvalue()
        assert "Logging error" not in err.getvalue()
    finally:
        root = logging.getLogger()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_main_process_loads_the_tokenizer_once(tmp_path, monkeypatch):
    """The launcher's directory check loads the tokenizer to validate it and hands that object to
    the ``TokenizerManager``: the main process reads the tokenizer files once at start-up (it read
    them twice: to check, then to serve). A manager given none loads its own; with
    ``--skip-tokenizer-init`` nothing is loaded."""
    import shutil

    import sglang_v4.utils
    from sglang_v4.entrypoints.launcher import resolve_model_path
    from sglang_v4.managers import tokenizer_manager as tm_mod
    from sglang_v4.managers.control_struct import SchedulerReadyInfo
    from sglang_v4.server_args import PortArgs, ServerArgs

    loads: list[str] = []
    real_get_tokenizer = sglang_v4.utils.get_tokenizer

    def counting_get_tokenizer(path: str):
        loads.append(path)
        return real_get_tokenizer(path)

    monkeypatch.setattr(sglang_v4.utils, "get_tokenizer", counting_get_tokenizer)
    monkeypatch.setattr(tm_mod, "get_tokenizer", counting_get_tokenizer)
    d = str(make_fake_model_dir(tmp_path))
    info = SchedulerReadyInfo(
        status="ready", max_total_num_tokens=4096, max_req_input_len=4095, context_len=4096
    )

    def manager(sa: ServerArgs, tokenizer):
        port_args = PortArgs.init_new()
        try:
            tm = tm_mod.TokenizerManager(sa, port_args, info, tokenizer)
            tm.close()
            return tm
        finally:
            shutil.rmtree(port_args.ipc_dir, ignore_errors=True)

    sa = ServerArgs(model_path=d, device="cpu")
    tok = resolve_model_path(sa)
    assert loads == [d] and tok is not None
    assert manager(sa, tok).tokenizer is tok and loads == [d]
    cold = manager(sa, None).tokenizer  # no hand-over: loaded here, as before
    assert loads == [d, d] and cold is not tok
    text = "Hello, world: 1 + 1 = 2"
    assert tok.encode(text) == cold.encode(text)
    skip = ServerArgs(model_path=d, device="cpu", skip_tokenizer_init=True)
    assert resolve_model_path(skip) is None and manager(skip, None).tokenizer is None
    assert loads == [d, d]
