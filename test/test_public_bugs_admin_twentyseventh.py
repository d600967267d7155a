"""A twenty-seventh set of public bug reports, replayed against the server's administration surface
in-process (``admin_app_testutil``: ``create_app`` with ``--api-key``, ``--enable-metrics``, two
served names, a scheduler that never answers): the challenge a 401 must carry, the case of the
``Bearer`` scheme, ``/health`` and ``/health_generate`` before the warm-up and after a crash, the
served names in ``/v1/models``, and the Prometheus exposition of ``/metrics``. Each test names its
report.

Fault found and fixed: no 401 carried ``WWW-Authenticate`` (go-gitea/gitea#24160 and the reports
beside it): the admission middleware's answer (every route family) and the routes' own key checks
(OpenAI's, Anthropic's) now send ``WWW-Authenticate: Bearer realm="sglang"``.

Oracles: RFC 9110 (section 15.5.2: a 401 MUST send ``WWW-Authenticate`` with a challenge; section
11.1: the scheme is case-insensitive, the credentials are not) read with a small parser written
here from the RFC's grammar, the ``openai`` client's own ``Model`` type, ``prometheus_client``'s
text parser plus the exposition format's rule (one ``# HELP`` and one ``# TYPE`` per metric name,
before its samples), and the reports' stated behaviour.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, ADMIN_NAMES, admin_app_client

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
#: RFC 9110 section 5.6.2: ``token = 1*tchar``.
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("r27admin"))) as pair:
        yield pair


def _challenge_schemes(value: str | None) -> list[str]:
    """The auth-schemes of a ``WWW-Authenticate`` value, lower-cased (RFC 9110 section 11.6.1:
    ``1#challenge``, ``challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]``): each comma
    separated item that starts with a bare token not followed by ``=`` opens a challenge."""
    if not value:
        return []
    schemes = []
    for item in value.split(","):
        m = re.match(rf"\s*({_TOKEN})(\s+|$)", item)
        if m and not item.strip().startswith(m.group(1) + "="):
            schemes.append(m.group(1).lower())
    return schemes


# --------------------------------------------------------------------------- 401 challenge
@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/v1/models", {}),
        ("POST", "/v1/chat/completions", {"Authorization": "Bearer wrong"}),
        ("POST", "/generate", {}),
        ("GET", "/get_model_info", {"Authorization": "Bearer wrong"}),
        ("POST", "/v1/messages", {"x-api-key": "wrong", "anthropic-version": "2023-06-01"}),
        ("GET", "/v1/files", {}),
    ],
)
def test_gitea_24160_a_401_names_its_challenge(
    admin: tuple[Any, Any], method: str, path: str, headers: dict[str, str]
) -> None:
    """go-gitea/gitea#24160 (also Luracast/Restler#221, pump-io/pump.io#687,
    mapillary/mapillary_issues#1645, cryostatio/cryostat-legacy#136): API 401 answers had no
    ``WWW-Authenticate`` header, so a client that waits for the challenge before sending its
    credentials (Ansible's ``uri``, git) never authenticated. Expected (RFC 9110 section 15.5.2,
    RFC 6750 section 3): every 401 -- key missing or wrong, on a native, OpenAI, Anthropic or Files
    route -- sends ``WWW-Authenticate`` with a ``Bearer`` challenge, the scheme the key is sent in."""
    client, _ = admin
    r = client.request(method, path, headers=headers, json={} if method == "POST" else None)
    assert r.status_code == 401
    assert "bearer" in _challenge_schemes(r.headers.get("www-authenticate")), r.headers


@pytest.mark.parametrize("family", ["openai", "native", "anthropic"])
def test_gitea_24160_every_error_builder_sends_the_challenge_with_a_401(family: str) -> None:
    """go-gitea/gitea#24160, the same rule one layer down: the routes check the key again
    themselves (the OpenAI routes' ``check_auth``, the Messages API's guard) and answer with their
    family's error builder. Each builder's 401 must carry the ``Bearer`` challenge, and its other
    statuses none (RFC 9110 section 11.6.1: the challenge belongs to 401)."""
    from sglang_v4.entrypoints.anthropic.serving_messages import anthropic_error_response
    from sglang_v4.entrypoints.native_api import error_response as native_error_response
    from sglang_v4.entrypoints.openai.request_errors import error_response

    build = {
        "openai": error_response,
        "native": native_error_response,
        "anthropic": anthropic_error_response,
    }[family]
    denied = build("Unauthorized: invalid or missing API key.", 401)
    assert denied.status_code == 401
    assert "bearer" in _challenge_schemes(denied.headers.get("www-authenticate"))
    assert "www-authenticate" not in build("bad field", 400).headers


def test_gitea_24160_other_errors_carry_no_challenge(admin: tuple[Any, Any]) -> None:
    """The other side of go-gitea/gitea#24160: the challenge belongs to 401 only (RFC 9110 section
    11.6.1); a 404 or 400 of an authenticated request carries none."""
    client, _ = admin
    r = client.get("/v1/models/no-such-model", headers=AUTH)
    assert r.status_code == 404 and "www-authenticate" not in r.headers
    r = client.post("/update_weights_from_disk", headers=AUTH, json={})
    assert r.status_code == 400 and "www-authenticate" not in r.headers


# --------------------------------------------------------------------------- bearer scheme case
@pytest.mark.parametrize(
    ("authorization", "allowed"),
    [
        (f"Bearer {ADMIN_KEY}", True),
        (f"bearer {ADMIN_KEY}", True),
        (f"BEARER {ADMIN_KEY}", True),
        (f"BeArEr {ADMIN_KEY}", True),
        (f"Bearer {ADMIN_KEY.upper()}", False),
        (f"Basic {ADMIN_KEY}", False),
        (ADMIN_KEY, False),
        ("Bearer", False),
    ],
)
def test_jetkvm_85_the_bearer_scheme_matches_in_any_case(
    admin: tuple[Any, Any], authorization: str, allowed: bool
) -> None:
    """jetkvm/cloud-api#85 (also oomol-lab/open-connector#188, kubestellar/console#7374,
    phax/phoss-smp#521): ``Authorization: bearer <key>`` got a 401 because the scheme was matched
    case-sensitively. Expected (RFC 9110 section 11.1): the scheme matches in any case; the key
    itself is compared exactly (a key differing only in case is refused), and another scheme or
    a bare key is refused."""
    client, _ = admin
    r = client.get("/v1/models", headers={"Authorization": authorization})
    assert r.status_code == (200 if allowed else 401), r.text


# --------------------------------------------------------------------------- health probes
@pytest.mark.parametrize("status", ["Starting", "UnHealthy"])
def test_mlx_knife_64_health_is_not_a_constant(admin: tuple[Any, Any], status: str) -> None:
    """mzau/mlx-knife#64: ``GET /health`` answered healthy before any model was loaded and after
    the backend failed -- a liveness signal wearing a readiness signal's name. Also
    sgl-project/sglang#8444 (``/health`` and ``/health_generate`` follow one logic: not serving
    until the warm-up is done). Expected: 503 from ``/health``, its ``HEAD`` and
    ``/health_generate`` while the server is starting or unhealthy (the last without asking the
    scheduler, which here never answers), 200 once it is up again."""
    client, tm = admin
    tm.server_status = status
    try:
        assert client.get("/health", headers=AUTH).status_code == 503
        assert client.head("/health", headers=AUTH).status_code == 503
        assert client.get("/health_generate", headers=AUTH).status_code == 503
    finally:
        tm.server_status = "Up"
    assert client.get("/health", headers=AUTH).status_code == 200


def test_sonar_390_health_after_a_backend_crash_is_not_200(admin: tuple[Any, Any]) -> None:
    """dphnAI/sonar#390: when the backend crashed, ``/health`` kept answering 200, so the
    supervisor polling it never restarted the server. Expected: a 503 from ``/health`` (and from
    ``/ping``, SageMaker's probe) once the tokenizer manager has seen the scheduler die, while
    the status field still says ``Up``."""
    client, tm = admin
    before = tm.crashed
    tm.crashed = "the scheduler process exited with code -9"
    try:
        assert tm.server_status == "Up"
        assert client.get("/health", headers=AUTH).status_code == 503
        assert client.get("/ping", headers=AUTH).status_code == 503
    finally:
        tm.crashed = before
    assert client.get("/health", headers=AUTH).status_code == 200


# --------------------------------------------------------------------------- /v1/models
def test_vllm_15845_models_lists_every_served_name(admin: tuple[Any, Any]) -> None:
    """vllm-project/vllm#15845 (the served name must be what the API reports),
    opendatahub-io/models-as-a-service#156 (``/v1/models`` gave the source model id instead of the
    name that serves) and incoai/splash#81 (each alias listed by ``/v1/models`` and accepted).
    Expected: the list holds one card per ``--served-model-name`` value, in order, each parsed by
    the ``openai`` client's ``Model`` type; ``GET /v1/models/{name}`` answers each name's card;
    the model path itself is not listed as an id."""
    from openai.types import Model

    client, tm = admin
    body = client.get("/v1/models", headers=AUTH).json()
    cards = [Model.model_validate(c) for c in body["data"]]
    assert body["object"] == "list"
    assert [c.id for c in cards] == ADMIN_NAMES
    assert all(c.object == "model" for c in cards)
    assert tm.server_args.model_path not in [c.id for c in cards]
    for name in ADMIN_NAMES:
        one = client.get(f"/v1/models/{name}", headers=AUTH)
        assert one.status_code == 200 and Model.model_validate(one.json()).id == name


# --------------------------------------------------------------------------- /metrics
def test_ascender_766_metrics_have_one_help_and_type_per_name(admin: tuple[Any, Any]) -> None:
    """ctrliq/ascender#766 (Zabbix: "multiple HELP comments found for metric"), payara/Payara#4579
    and prometheus/common#265 ("second TYPE line for metric name ..., or TYPE reported after
    samples"). Expected (the Prometheus text exposition format): each metric name has at most one
    ``# HELP`` and one ``# TYPE`` line, the ``TYPE`` before any of its samples, and the whole page
    is read by ``prometheus_client``'s own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    client, _ = admin
    r = client.get("/metrics", headers=AUTH)
    assert r.status_code == 200
    text = r.text
    helps = Counter(line.split()[2] for line in text.splitlines() if line.startswith("# HELP "))
    types = Counter(line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))
    assert helps and types
    assert [n for n, k in helps.items() if k > 1] == [] and [n for n, k in types.items() if k > 1] == []
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            sample = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
            assert sample is not None
            name = sample.group(0)
            base = re.sub(r"_(bucket|sum|count|total|created)$", "", name)
            assert name in typed or base in typed, f"sample before its TYPE: {line}"
    families = list(text_string_to_metric_families(text))
    assert {f.name for f in families} >= {re.sub(r"_total$", "", n) for n in types}
