"""The in-process admin app shared by the route tests: ``http_server.create_app`` (no lifespan)
over a ``TokenizerManager`` whose scheduler socket is read and never answered, so requests that
reach the scheduler hang while every route that answers before it can be checked."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import zmq

ADMIN_KEY = "sk-admin-test"
ADMIN_NAMES = ["fake-v4", "fake-v4-alias"]
ADMIN_CONTEXT = 4096


@contextmanager
def admin_app_client(
    model_root: Path, openai_routes: bool = True, root_path: str = ""
) -> Iterator[tuple[Any, Any]]:
    """A ``TestClient`` over ``create_app`` with ``--api-key ADMIN_KEY``, ``--enable-metrics`` and
    the served names ``ADMIN_NAMES`` (context ``ADMIN_CONTEXT`` tokens), the fake model written
    under ``model_root``; its tokenizer manager stands for the started one (status ``Up``) and its
    scheduler never answers. ``openai_routes=False`` leaves the OpenAI routes unmounted (the
    native routes only; building the OpenAI router takes seconds). ``root_path``: the server's
    ``--root-path`` (none by default). Yields
    ``(client, tokenizer_manager)``; closes both on exit."""
    from fastapi.testclient import TestClient
    from server_fixture import make_fake_model_dir
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.entrypoints.metrics import TokenizerMetrics
    from sglang_v4.entrypoints.route_families import mount_openai
    from sglang_v4.managers.control_struct import SchedulerReadyInfo
    from sglang_v4.managers.tokenizer_manager import TokenizerManager
    from sglang_v4.server_args import PortArgs, ServerArgs

    sa = ServerArgs(
        model_path=str(make_fake_model_dir(model_root)),
        device="cpu",
        enable_metrics=True,
        served_model_name=ADMIN_NAMES,
        api_key=ADMIN_KEY,
        root_path=root_path,
    )
    info = SchedulerReadyInfo(
        status="ready",
        max_total_num_tokens=ADMIN_CONTEXT,
        max_req_input_len=ADMIN_CONTEXT - 1,
        context_len=ADMIN_CONTEXT,
    )
    pa = PortArgs.init_new()
    inbox = zmq.Context.instance().socket(zmq.PULL)  # the scheduler: it reads and never answers
    inbox.bind(pa.scheduler_input_ipc_name)
    tm = TokenizerManager(sa, pa, info, None)
    try:
        tm.metrics = TokenizerMetrics(ADMIN_NAMES[0])
        app, state = create_app(sa, SimpleNamespace(scheduler_info=info, port_args=pa))  # type: ignore[arg-type]
        state.tokenizer_manager = tm
        if openai_routes:
            state.openai_serving = mount_openai(app, tm, sa)
        tm.server_status = "Up"
        yield TestClient(app), tm
    finally:
        tm.close()
        inbox.close(linger=0)
        shutil.rmtree(pa.ipc_dir, ignore_errors=True)
