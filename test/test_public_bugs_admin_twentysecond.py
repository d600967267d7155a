"""A twenty-second set of public bug reports, replayed against the server's administration surface:
the flag values the offline ``Engine`` / ``ServerArgs`` take as keywords, ``/get_model_info``'s
fields, and ``/start_profile``'s ``output_dir``. Each test names its report.

Faults found here and fixed: a keyword outside a flag's list of values (``Engine(attention_backend=
"torch_sdpa")``, ``ServerArgs(moe_runner_backend="no-such")``, ...) was accepted for some fifty
SGLang flags, where the command line exits 2 with argparse's ``invalid choice``; ``/start_profile``
(and ``Engine.start_profile``) took an ``output_dir`` naming a file, one under a file, or one
holding a NUL byte, and failed only in the scheduler (a NUL byte raised there, outside the
``OSError`` it answers); a string for a switch (``Engine(disable_cuda_graph="false")``) turned
it on, a string or list for ``mem_fraction_static`` / ``watchdog_timeout`` failed without
naming the field, and a non-string ``host`` / ``tokenizer_path`` / ``ssl_keyfile_password`` was
accepted; ``/get_model_info`` lacked SGLang's ``reasoning_parser``,
``tool_call_parser`` and ``disaggregation_mode``.

Fixtures: the app of ``http_server.create_app`` in-process (``admin_app_testutil``), whose
scheduler never answers, so a refused request is seen to change nothing. Oracles: SGLang 0.5.23's
own argument parser (``sglang.srt.server_args.ServerArgs.add_cli_args``) and ``/model_info``
answer (its installed source), Python's
``os.makedirs`` on the same path (whether the trace directory can be made at all).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import functools
import importlib.util
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, admin_app_client

sglang_server_args = pytest.importorskip("sglang.srt.server_args")

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}


@functools.cache
def _sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    sglang_server_args.ServerArgs.add_cli_args(parser)
    return parser


def _sglang_exit(argv: list[str]) -> tuple[int, str]:
    """``(exit code, stderr)`` of SGLang's own parser on ``argv`` (0 when it parses)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            _sglang_parser().parse_args(argv)
        except SystemExit as e:
            return int(e.code or 0), err.getvalue()
    return 0, ""


def _our_choice_actions() -> dict[str, argparse.Action]:
    """SGLang's flags with ``choices`` that this launcher accepts, by SGLang's first spelling:
    this launcher's action for each."""
    from sglang_v4.server_args import ServerArgs

    ours = argparse.ArgumentParser()
    ServerArgs.add_cli_args(ours)
    by_flag = {name: a for a in ours._actions for name in a.option_strings}
    return {
        a.option_strings[0]: by_flag[a.option_strings[0]]
        for a in _sglang_parser()._actions
        if a.choices is not None and a.option_strings and a.option_strings[0] in by_flag
    }


def _bogus(choices: Any) -> Any:
    """A value outside ``choices``, in the type the flag takes."""
    if all(isinstance(c, int) and not isinstance(c, bool) for c in choices):
        return max(choices) + 1000
    return "no-such-choice"


# --------------------------------------------------------------------------- Engine keywords


def test_llm_scaler_403_engine_keyword_outside_the_choices_is_refused_naming_the_field() -> None:
    """intel/llm-scaler#403: ``--attention-backend torch_sdpa`` is refused by SGLang's parser
    (``argument --attention-backend: invalid choice: 'torch_sdpa'``, exit 2). Expected: the same
    value passed to the offline ``Engine`` as a keyword is a ``ValueError`` naming the field and
    the value before anything starts, not accepted and logged as an ignored flag."""
    from sglang_v4.entrypoints.engine import Engine

    code, err = _sglang_exit(["--model-path", "m", "--attention-backend", "torch_sdpa"])
    assert code == 2 and "invalid choice: 'torch_sdpa'" in err, err
    with pytest.raises(ValueError, match=r"attention_backend.*'torch_sdpa'"):
        Engine(device="cpu", attention_backend="torch_sdpa")


def test_every_sglang_choice_flag_refuses_a_bad_keyword_as_the_command_line_does() -> None:
    """The same refusal for every flag SGLang 0.5.23 limits to a list of values (the kind of
    intel/llm-scaler#403): for each one, SGLang's parser exits 2 on a value outside its list, and
    ``ServerArgs(<field>=that value)`` (what ``Engine(**kwargs)`` builds) raises a ``ValueError``
    naming the field; the first and last of SGLang's values (by name) get no choice refusal (they may be
    refused as an unsupported feature, by name, as on the command line)."""
    from sglang_v4.server_args import ServerArgs

    actions = _our_choice_actions()
    assert len(actions) > 60, sorted(actions)
    accepted_bad = []
    for flag, action in actions.items():
        if action.dest == "device":
            continue  # a value this launcher resolves itself (cpu / cuda), checked in its own test
        sglang_action = next(a for a in _sglang_parser()._actions if flag in a.option_strings)
        bad = _bogus(sglang_action.choices)
        code, err = _sglang_exit(["--model-path", "m", flag, str(bad)])
        assert code == 2 and "invalid choice" in err, (flag, err)
        value = [bad] if action.nargs in ("*", "+") else bad
        try:
            ServerArgs(device="cpu", **{action.dest: value})
        except ValueError as e:
            assert action.dest in str(e), (flag, str(e))
        else:
            accepted_bad.append(flag)
        listed = sorted(sglang_action.choices, key=str)
        for good in {listed[0], listed[-1]}:
            value = [good] if action.nargs in ("*", "+") else good
            try:
                ServerArgs(device="cpu", **{action.dest: value})
            except ValueError as e:
                assert f"({action.option_strings[0]}) must be one of" not in str(e), (flag, good, str(e))
    assert accepted_bad == []


def _sglang_switches() -> dict[str, argparse.Action]:
    """SGLang's ``store_true`` / ``--no-`` switches (no value taken) by ``dest``."""
    return {
        a.dest: a
        for a in _sglang_parser()._actions
        if a.option_strings
        and a.nargs == 0
        and a.const is True
        or isinstance(a, argparse.BooleanOptionalAction)
    }


def test_distributed_ba3c_3_string_false_for_a_switch_is_refused_not_truthy() -> None:
    """deepsense-ai/Distributed-BA3C#3 (boolean options given as strings: ``"False"`` is a
    non-empty string, so the option was on). On the command line SGLang's switches take no value
    (``--disable-cuda-graph false`` is an unrecognized argument, exit 2); as an ``Engine`` /
    ``ServerArgs`` keyword, ``"false"`` must not turn a switch on: every switch field this launcher
    shares with SGLang refuses a string with a ``ValueError`` naming the field, and takes
    ``False``."""
    import dataclasses

    from sglang_v4.server_args import ServerArgs

    code, err = _sglang_exit(["--model-path", "m", "--disable-cuda-graph", "false"])
    assert code == 2 and "unrecognized arguments: false" in err, err
    ours = {f.name for f in dataclasses.fields(ServerArgs)}
    shared = sorted(set(_sglang_switches()) & ours)
    assert {"disable_cuda_graph", "enable_metrics", "trust_remote_code", "disable_radix_cache"} <= set(shared)
    accepted = []
    for name in shared:
        try:
            ServerArgs(device="cpu", **{name: "false"})
        except ValueError as e:
            assert name in str(e), (name, str(e))
        else:
            accepted.append(name)
        ServerArgs(device="cpu", **{name: False})
    assert accepted == []


def test_ba3c_kind_numeric_fields_refuse_a_string_by_name() -> None:
    """deepsense-ai/Distributed-BA3C#3's kind (an option given in a type its parser never
    produced) for SGLang's float flags (``type=float`` on the command line: a keyword of
    another type never went through that conversion): ``mem_fraction_static="garbage"`` raised
    float()'s message without the field, ``mem_fraction_static=[0.8]`` and
    ``watchdog_timeout="300"`` a ``TypeError`` from a comparison. Expected: a ``ValueError`` naming
    the field, as for the flag's other bad values; SGLang's parser converts the same text to a
    float. Likewise a non-string for the text flags ``host`` / ``tokenizer_path`` /
    ``ssl_keyfile_password`` (accepted before, failing at bind or load), refused without echoing
    the value."""
    from sglang_v4.server_args import ServerArgs

    sglang = _sglang_parser().parse_args(["--model-path", "m", "--mem-fraction-static", "0.8"])
    assert isinstance(sglang.mem_fraction_static, float)
    for name, bad in (
        ("mem_fraction_static", "garbage"),
        ("mem_fraction_static", [0.8]),
        ("mem_fraction_static", True),
        ("watchdog_timeout", "300"),
        ("watchdog_timeout", [300]),
    ):
        with pytest.raises(ValueError, match=name):
            ServerArgs(device="cpu", **{name: bad})
    assert ServerArgs(device="cpu", mem_fraction_static=0.8, watchdog_timeout=30).mem_fraction_static == 0.8
    for name in ("host", "tokenizer_path", "ssl_keyfile_password"):  # type=str flags
        with pytest.raises(ValueError, match=f"{name} must be a string") as refused:
            ServerArgs(device="cpu", **{name: b"k3y-bytes"})
        assert "k3y-bytes" not in str(refused.value)  # a password's value is never echoed


# --------------------------------------------------------------------------- --admin-api-key


def _sglang_source(relpath: str) -> Path:
    """A file of the installed SGLang package (read or loaded alone: importing its packages needs
    GPU-only modules and a minute)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / relpath


def _sglang_route_levels() -> dict[str, str]:
    """Route path -> SGLang 0.5.23's ``auth_level`` name for the routes of its ``http_server.py``
    that carry one (``ADMIN_OPTIONAL`` / ``ADMIN_FORCE``)."""
    tree = ast.parse(_sglang_source("srt/entrypoints/http_server.py").read_text())
    levels: dict[str, str] = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        paths, level = [], None
        for d in node.decorator_list:
            if not isinstance(d, ast.Call):
                continue
            name = ast.unparse(d.func)
            if name.startswith("app.") and d.args and isinstance(d.args[0], ast.Constant):
                paths.append(d.args[0].value)
            if name == "auth_level":
                level = ast.unparse(d.args[0]).rsplit(".", 1)[-1]
        for path in paths:
            if level is not None:
                levels[path] = level
    return levels


def test_sglang_15908_admin_api_key_tiers_decide_as_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-project/sglang#15908 (``--admin-api-key``: three tiers; an ``api_key`` holder may not
    call weight updates, pause or abort when an admin key is set, and with only an admin key the
    normal routes stay open). Expected: for each of the four key set-ups, each route of this
    server that SGLang marks ``ADMIN_OPTIONAL`` (read from its ``http_server.py``) plus a normal,
    an OpenAI and an open route, and each ``Authorization`` header (none, either key, another
    case of the scheme), the admission middleware lets the request through exactly when SGLang
    0.5.23's own ``decide_request_auth`` (``srt/utils/auth.py``, loaded alone) allows it."""
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints.admission import ADMIN_ROUTES, AdmissionLimits, AdmissionMiddleware

    spec = importlib.util.spec_from_file_location("sglang_auth_oracle", _sglang_source("srt/utils/auth.py"))
    assert spec is not None and spec.loader is not None
    auth = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, auth)  # its dataclasses resolve their module
    spec.loader.exec_module(auth)
    levels = _sglang_route_levels()
    admin_routes = sorted(p for p, level in levels.items() if level == "ADMIN_OPTIONAL" and p in ADMIN_ROUTES)
    assert {"/update_weights_from_disk", "/pause_generation", "/abort_request", "/flush_cache"} <= set(
        admin_routes
    )
    paths = [*admin_routes, "/generate", "/v1/chat/completions", "/health", "/metrics"]

    async def reached(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    key, admin_key = "sk-plain-22", "sk-admin-22"
    headers = [None, f"Bearer {key}", f"Bearer {admin_key}", f"bearer {admin_key}", admin_key]
    wrong = []
    for api, admin in ((None, None), (key, None), (None, admin_key), (key, admin_key)):
        client = TestClient(AdmissionMiddleware(reached, api, AdmissionLimits(), lambda: False, admin))
        for path in paths:
            level = auth.AuthLevel(levels[path].lower()) if path in levels else auth.AuthLevel.NORMAL
            for header in headers:
                expected = auth.decide_request_auth(
                    method="POST",
                    path=path,
                    authorization_header=header,
                    api_key=api,
                    admin_api_key=admin,
                    auth_level=level,
                ).allowed
                got = client.post(path, headers={"Authorization": header} if header else {}).status_code
                if (got == 299) != expected:
                    wrong.append((api, admin, path, header, got, expected))
    assert wrong == []


# --------------------------------------------------------------------------- /get_model_info


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with admin_app_client(Path(tmp_path_factory.mktemp("admin22"))) as pair:
        yield pair


def _sglang_model_info_keys() -> set[str]:
    """The keys of the dict SGLang 0.5.23's ``/model_info`` always answers (read from its
    installed ``http_server.py``)."""
    text = _sglang_source("srt/entrypoints/http_server.py").read_text()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "model_info":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Dict):
                    return {k.value for k in sub.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("model_info's answer not found in SGLang's http_server.py")


def test_sglang_35027_model_info_reports_the_parsers_in_effect(admin: tuple[Any, Any]) -> None:
    """sgl-project/sglang#35027 (``/model_info`` reports the reasoning and tool-call parsers in
    effect, ``auto`` resolved, since ``/server_info`` reports what was asked for). Expected: every
    key SGLang 0.5.23's ``/model_info`` answers is in ``/get_model_info`` (and the ``Engine``'s,
    one builder); with ``--reasoning-parser auto --tool-call-parser auto`` the answer names a
    parser of SGLang's lists, not ``auto``."""
    from sglang_v4.entrypoints.server_info import build_model_info
    from sglang_v4.server_args import ServerArgs

    client, _ = admin
    expected = _sglang_model_info_keys()
    assert {"reasoning_parser", "tool_call_parser", "weight_version", "served_model_name"} <= expected
    r = client.get("/get_model_info", headers=AUTH)
    assert r.status_code == 200, r.text
    assert expected <= set(r.json()), sorted(expected - set(r.json()))
    sa = ServerArgs(device="cpu", reasoning_parser="auto", tool_call_parser="auto")
    info = build_model_info(sa, {}, 4096, 129280)
    parsers = {a.dest: a.choices for a in _sglang_parser()._actions if a.dest in info}
    for name in ("reasoning_parser", "tool_call_parser"):
        assert info[name] != "auto" and info[name] in parsers[name], (name, info[name])
    assert info["disaggregation_mode"] in parsers["disaggregation_mode"]


# --------------------------------------------------------------------------- /start_profile output_dir


def _unusable_dirs(root: Path) -> dict[str, str]:
    """Kind -> an ``output_dir`` the trace directory cannot be made at (``os.makedirs`` fails)."""
    a_file = root / "trace.json"
    a_file.write_text("{}")
    return {
        "a file": str(a_file),
        "under a file": str(a_file / "traces"),
        "a NUL byte": str(root / "tr\x00aces"),
    }


def test_sglang_jax_148_unusable_profile_output_dir_is_a_400_and_nothing_starts(
    admin: tuple[Any, Any], tmp_path: Path
) -> None:
    """sgl-project/sglang-jax#148 (``/start_profile`` with an ``output_dir`` the server cannot
    write to crashed the server; fixed by sgl-project/sglang-jax#157, a check before the profiler
    starts). Expected: an ``output_dir`` that ``os.makedirs`` cannot make (a file, a path under a
    file, a NUL byte) is a native 400 naming ``output_dir`` (the body's ``error.message``), the
    request never reaches the scheduler (no profile is open) and the next request is answered."""
    client, tm = admin
    for kind, path in _unusable_dirs(tmp_path).items():
        with pytest.raises((OSError, ValueError)):
            os.makedirs(path, exist_ok=True)  # the oracle: the directory cannot be made
        r = client.post("/start_profile", json={"output_dir": path}, headers=AUTH)
        assert r.status_code == 400, (kind, r.text)
        assert "output_dir" in r.json()["error"]["message"], (kind, r.text)
        assert tm.profile_open is False
    assert client.get("/health", headers=AUTH).status_code == 200


def test_sglang_2874_engine_start_profile_checks_output_dir_like_the_route(tmp_path: Path) -> None:
    """sgl-project/sglang#2874 (``Engine.start_profile()`` wrote no trace and said nothing: the
    directory the trace goes to was not the one the user looked in / could use). Expected: the
    ``Engine``'s body parser (shared with the route) refuses an unusable ``output_dir`` with a
    ``ValueError`` naming it, and takes a missing directory under a writable one (made when the
    profile starts, as SGLang makes it) and an existing one, unchanged."""
    from sglang_v4.entrypoints.control_api import parse_profile_body

    for path in _unusable_dirs(tmp_path).values():
        with pytest.raises(ValueError, match="output_dir"):
            parse_profile_body({"output_dir": path}, "cpu")
    missing = tmp_path / "new" / "traces"
    assert parse_profile_body({"output_dir": str(missing)}, "cpu").output_dir == str(missing)
    assert not missing.exists()  # nothing is made by a parse
    assert parse_profile_body({"output_dir": str(tmp_path)}, "cpu").output_dir == str(tmp_path)
