"""A twenty-eighth set of public bug reports, replayed against operating the server: which routes
``--api-key`` guards (the health probes a load balancer calls without credentials stay open, the
API does not), an empty ``--api-key`` (no authentication, as SGLang reads it), ``--log-level``
spelled in any case and with Python's level names, a misspelt level refused at start-up, and the
``model_name`` label of the ``/metrics`` families under ``--served-model-name``.

Fixtures: the ``AdmissionMiddleware`` in front of a Starlette app of stand-in routes (driven with
Starlette's ``TestClient``), the launch-flag parser of ``sglang_flags_testutil``, and an
in-process ``TokenizerMetrics``. Oracles: SGLang's installed ``decide_request_auth`` (its own
rule for each route and key), Python's ``logging`` module (which level a name means),
``prometheus_client``'s text parser, and the values the reports state.

No fault was found by these reports; the tests guard the behaviour they ask for.
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
    """SGLang's own decision for a normal-level route (its installed ``decide_request_auth``;
    where SGLang is not installed, the rule sgl-project/sglang#901 states: the health, readiness
    and metrics routes are open, every other route needs the key when one is set)."""
    try:
        from sglang.srt.utils.auth import AuthLevel, decide_request_auth
    except ImportError:
        return not api_key or path in PROBES or token == api_key

    header = f"Bearer {token}" if token is not None else None
    return decide_request_auth(
        method="GET", path=path, authorization_header=header, api_key=api_key,
        admin_api_key=None, auth_level=AuthLevel.NORMAL,
    ).allowed  # fmt: skip


# --------------------------------------------------------------------------- --api-key
def test_sglang_901_health_probes_need_no_key_while_the_api_does() -> None:
    """sgl-project/sglang#901 (also gptme/gptme#3701 and
    algorithmicsuperintelligence/optillm#7): with ``--api-key`` set, ``/health`` demanded the key,
    and cloud / Kubernetes health checks, which cannot send credentials, marked the server down.
    Expected: ``/health``, ``/health_generate``, ``/ready`` and ``/metrics`` answer 200 with no
    key or a wrong one; the API routes answer 401 without the key or with a wrong one and 200 with
    ``Authorization: Bearer KEY``: SGLang's own rule for every route and token."""
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
    route answers 200 with no ``Authorization`` header, as SGLang's ``decide_request_auth``
    decides for an empty key."""
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
