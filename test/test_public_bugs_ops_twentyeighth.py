"""A twenty-eighth set of public bug reports, replayed against operating the server: which routes
``--api-key`` guards (the health probes a load balancer calls without credentials stay open, the
API does not), an empty ``--api-key`` (no authentication, as SGLang reads it), ``--log-level``
spelled in any case and with Python's level names, a misspelt level refused at start-up, and the
``model_name`` label of the ``/metrics`` families under ``--served-model-name``, and SGLang's legacy
``SGL_`` spelling of the environment variables the server reads.

Fixtures: the ``AdmissionMiddleware`` in front of a Starlette app of stand-in routes (driven with
Starlette's ``TestClient``), the launch-flag parser of ``sglang_flags_testutil``, and an
in-process ``TokenizerMetrics``. Oracles: the rule sgl-project/sglang#901 settled on (which routes
need the key), Python's ``logging`` module (which level a name means),
``prometheus_client``'s text parser, and the values the reports state.

Fault found here and fixed: the legacy ``SGL_<NAME>`` spelling of a variable the server reads
(``SGL_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN``, ``SGL_LOG_REQUEST_EXCEEDED_MS``, ...), which SGLang
reads as ``SGLANG_<NAME>`` with a deprecation warning, was ignored and reported as "set but not
read"; start-up now copies it to the current name (which wins when both are set) and warns.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sglang_flags_testutil import parse

KEY = "sk-ops-28"
PROBES = ("/health", "/health_generate", "/ready", "/metrics")
API = ("/v1/models", "/v1/chat/completions", "/generate", "/get_model_info")


def _client(api_key: str | None) -> Any:
    """Starlette ``TestClient`` of stand-in routes (each answers 200 "ok") behind the server's
    ``AdmissionMiddleware`` configured with ``api_key``."""
    from sglang_v4.entrypoints.admission import AdmissionLimits, AdmissionMiddleware
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route(p, ok, methods=["GET", "POST"]) for p in (*PROBES, *API)])
    limits = AdmissionLimits(max_body_bytes=1 << 20, read_timeout_s=10.0, keep_alive_s=5.0)
    return TestClient(AdmissionMiddleware(app, api_key, limits, lambda: False))  # type: ignore[arg-type]


def _sglang_allows(path: str, api_key: str | None, token: str | None) -> bool:
    """The rule sgl-project/sglang#901 settled on (SGLang's ``add_api_key_middleware``): with a
    non-empty key set, the health, readiness and metrics routes are open and every other route
    needs ``Authorization: Bearer KEY``; with no key (or an empty one) every route is open."""
    return not api_key or path in PROBES or token == api_key


# --------------------------------------------------------------------------- --api-key
def test_sglang_901_health_probes_need_no_key_while_the_api_does() -> None:
    """sgl-project/sglang#901 (also gptme/gptme#3701 and
    algorithmicsuperintelligence/optillm#7): with ``--api-key`` set, ``/health`` demanded the key,
    and cloud / Kubernetes health checks, which cannot send credentials, marked the server down.
    Expected: ``/health``, ``/health_generate``, ``/ready`` and ``/metrics`` answer 200 with no
    key or a wrong one; the API routes answer 401 without the key or with a wrong one and 200 with
    ``Authorization: Bearer KEY``."""
    c = _client(KEY)
    for path in (*PROBES, *API):
        for token in (None, "wrong", KEY):
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            allowed = c.get(path, headers=headers).status_code == 200
            assert allowed == _sglang_allows(path, KEY, token), (path, token)
    assert all(c.get(p).status_code == 200 for p in PROBES)
    assert all(c.get(p).status_code == 401 for p in API)


def test_sglang_901_an_empty_api_key_turns_authentication_off() -> None:
    """sgl-project/sglang#901's answer ("You may set 'EMPTY'") and SGLang's reading of
    ``--api-key``: only a non-empty key is checked. Expected: ``--api-key ''`` parses, and every
    route answers 200 with no ``Authorization`` header, as SGLang reads an empty key."""
    args = parse("--model-path m --api-key ''")
    assert not args.api_key
    c = _client(args.api_key)
    for path in (*PROBES, *API):
        assert _sglang_allows(path, args.api_key, None), path
        assert c.get(path).status_code == 200, path


# --------------------------------------------------------------------------- --log-level
@pytest.mark.parametrize("given", ["INFO", "Debug", "WARNING", "Error", "CRITICAL", "warn", "fatal"])
def test_hookshot_250_log_level_in_any_case(given: str) -> None:
    """matrix-org/matrix-hookshot#250 and bcgov/indy-tails-server#114: ``DEBUG`` / ``INFO`` were
    refused where ``debug`` / ``info`` were accepted ("case does not matter" was the fix).
    Expected: ``--log-level`` accepts any case and Python's other names for a level (``warn``,
    ``fatal``), and runs at the level Python's ``logging`` gives that name."""
    want = logging.getLevelName(given.upper())
    assert isinstance(want, int)
    got = parse(f"--model-path m --log-level {given}").log_level
    assert logging.getLevelName(got.upper()) == want


def test_greenmask_283_every_documented_level_is_accepted_and_a_misspelling_refused() -> None:
    """GreenmaskIO/greenmask#283 (a documented level, ``error``, refused as "unknown log level")
    and adobe-apiplatform/user-sync.py#2 (``errorx`` accepted with no message). Expected: each of
    SGLang's documented levels (debug, info, warning, error, critical) parses to itself; a name
    Python's ``logging`` does not know is refused at start-up with a ``ValueError`` that names
    ``log_level`` and lists the accepted levels."""
    for level in ("debug", "info", "warning", "error", "critical"):
        assert isinstance(logging.getLevelName(level.upper()), int)
        assert parse(f"--model-path m --log-level {level}").log_level == level
    assert not isinstance(logging.getLevelName("ERRORX"), int)
    with pytest.raises(ValueError, match="log_level") as e:
        parse("--model-path m --log-level errorx")
    assert all(level in str(e.value) for level in ("debug", "info", "warning", "error", "critical"))


# --------------------------------------------------------------------------- /metrics model_name
def test_vllm_45465_metrics_are_labelled_with_the_served_model_name() -> None:
    """vllm-project/vllm#45465: with ``--served-model-name my-model`` the metrics still carried
    the model path (``model_name="Qwen/Qwen3-0.6B"``), so dashboards filtering on the public name
    showed nothing. Expected: the name the APIs serve is ``my-model`` and every sample of the
    ``/metrics`` exposition carries ``model_name="my-model"``, none the path; without the flag
    the label is the served default, not a path with ``/`` in it."""
    from prometheus_client.parser import text_string_to_metric_families
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    path = "/mnt/models/DeepSeek-V4-Flash/"
    for flags, want in (("--served-model-name my-model", "my-model"), ("", "DeepSeek-V4-Flash")):
        name = parse(f"--model-path {path} {flags}").resolved_served_model_name()
        assert name == want
        m = TokenizerMetrics(name)
        m.update_gauges({"num_running_reqs": 1, "token_usage": 0.5})
        labels = {
            s.labels.get("model_name")
            for fam in text_string_to_metric_families(m.render().decode())
            for s in fam.samples
        }
        assert labels == {want}, labels


# --------------------------------------------------------------------------- legacy SGL_ env names
def test_sglang_38219_legacy_sgl_names_of_read_variables_take_effect() -> None:
    """sgl-project/sglang#38219 (a legacy ``SGL_`` variable "silently ignored") and
    sgl-project/sglang#14943 (SGLang's warning "Environment variable SGL_X is deprecated, please
    use SGLANG_X"): SGLang reads every ``SGL_<NAME>`` as ``SGLANG_<NAME>``. Expected: the legacy
    spelling of each variable this server reads sets it (``SGL_LOG_REQUEST_EXCEEDED_MS=250`` is a
    250 ms threshold, ``SGL_HEALTH_CHECK_TIMEOUT=7`` a 7 s probe), one warning names the legacy
    name and the current one, and neither is reported as "set but not read"; a legacy name of a
    variable the server does not read is still reported."""
    from sglang_v4.managers.request_log import log_exceeded_ms
    from sglang_v4.managers.tokenizer_control_mixin import health_check_timeout_s
    from sglang_v4.server_args_compat import apply_legacy_sglang_env, unread_sglang_env

    env = {
        "SGL_LOG_REQUEST_EXCEEDED_MS": "250",
        "SGL_HEALTH_CHECK_TIMEOUT": "7",
        "SGL_ENABLE_JIT_DEEPGEMM": "1",
    }
    assert log_exceeded_ms(env) == -1  # before start-up reads the legacy names: unset
    log = logging.getLogger("test.legacy_env")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    log.addHandler(handler)
    try:
        found = apply_legacy_sglang_env(env, log=log)
    finally:
        log.removeHandler(handler)
    assert found == {
        "SGL_HEALTH_CHECK_TIMEOUT": "SGLANG_HEALTH_CHECK_TIMEOUT",
        "SGL_LOG_REQUEST_EXCEEDED_MS": "SGLANG_LOG_REQUEST_EXCEEDED_MS",
    }
    assert log_exceeded_ms(env) == 250
    assert health_check_timeout_s(env) == 7.0
    assert unread_sglang_env(env) == ["SGL_ENABLE_JIT_DEEPGEMM"]
    assert len(records) == 1
    text = records[0].getMessage()
    assert all(name in text for pair in found.items() for name in pair)


def test_sglang_38219_legacy_allow_longer_context_name_allows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-project/sglang#38219: a legacy ``SGL_`` setting was dropped, so the behaviour it asks
    for did not happen. Expected: with only ``SGL_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1`` set, a
    ``--context-length`` above the model's is refused before start-up reads the legacy names and
    allowed (with a warning) after, exactly as with ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``."""
    from types import SimpleNamespace

    from sglang_v4.entrypoints.launcher import check_context_length
    from sglang_v4.server_args_compat import apply_legacy_sglang_env

    current = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
    monkeypatch.setenv(current, "0")  # recorded, so that teardown removes what start-up sets
    monkeypatch.delenv(current)
    monkeypatch.setenv("SGL_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    model = SimpleNamespace(context_length=4096, context_length_key="max_position_embeddings")
    with pytest.raises(ValueError, match="context_length"):
        check_context_length(8192, model)
    apply_legacy_sglang_env()
    check_context_length(8192, model)
