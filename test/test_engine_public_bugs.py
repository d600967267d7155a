"""Public bug reports of SGLang's offline ``Engine``, replayed against ``sglang_v4.Engine``.

The engine runs the real processes with the model-free FakeScheduler (``server_fixture``), so the
expected texts come from ``transformers.AutoTokenizer`` on the same tokenizer files, independent
of the runtime's own tokenizer wrapper.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from server_fixture import fake_output_text, hf_auto_tokenizer, start_fake_engine

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def model(shared_fake_model_dir: Path) -> Path:
    """The model directory of conftest's ``shared_fake_engine``."""
    return shared_fake_model_dir


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on ``FakeScheduler`` (its default flags are
    :func:`server_fixture.start_fake_engine`'s; its ``[hold]`` prompts are none of this module's)."""
    return shared_fake_engine


@pytest.fixture(scope="module")
def expected() -> Any:
    tok = hf_auto_tokenizer()
    return lambda n: fake_output_text(tok, n)


def test_sglang_generate_keywords_accepted_when_unset(engine, expected) -> None:
    """sgl-project/sglang#2968 (RL frameworks drive ``sgl.Engine.generate`` with SGLang's whole
    keyword set, e.g. ``image_data=None``, ``lora_path=None``, ``return_hidden_states=False``,
    ``custom_logit_processor=None``): unset they change nothing; before, each was a TypeError
    (unexpected keyword argument)."""
    out = engine.generate(
        prompt=["a", "b"],
        sampling_params={"max_new_tokens": 3},
        image_data=[None, None],
        lora_path=None,
        custom_logit_processor=None,
        return_hidden_states=False,
        token_ids_logprob=None,
        data_parallel_rank=None,
        bootstrap_host=None,
        mm_hashes=None,
        external_trace_header=None,
        cache_salt="salt",
    )
    assert [o["text"] for o in out] == [expected(3)] * 2
    # SGLang's positional order: prompt, sampling_params, input_ids, image_data
    out = engine.generate("Hi", {"max_new_tokens": 2}, None, None)
    assert out["text"] == expected(2)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"image_data": "https://example.com/cat.png"}, "image_data"),
        ({"image_data": [None, "cat.png"]}, "image_data"),
        ({"lora_path": "adapter-1"}, "lora_path"),
        ({"return_hidden_states": True}, "return_hidden_states"),
        ({"custom_logit_processor": "{}"}, "custom_logit_processor"),
        ({"kv_hints": {"k": 1}}, "kv_hints"),
    ],
)
def test_unsupported_feature_is_a_value_error_naming_it(engine, expected, kwargs, field) -> None:
    """sgl-project/sglang#2968: a feature this runtime does not implement is refused with a
    ``ValueError`` naming it (as ``/generate`` answers 400), not a TypeError or a silent drop;
    the engine keeps serving."""
    with pytest.raises(ValueError, match=field):
        engine.generate(prompt=["x", "y"], sampling_params={"max_new_tokens": 2}, **kwargs)
    with pytest.raises(ValueError, match=field):
        asyncio.run(engine.async_generate(prompt="x", sampling_params={"max_new_tokens": 2}, **kwargs))
    assert engine.generate(prompt="ok", sampling_params={"max_new_tokens": 2})["text"] == expected(2)


def test_bad_argument_types_are_value_errors_naming_the_field(engine) -> None:
    """Bad input through the Engine gets the checks ``/generate`` makes (a ``ValueError`` naming
    the field); before, ``sampling_params=5`` raised ``TypeError: object of type 'int' has no
    len()`` from inside the request normalization."""
    with pytest.raises(ValueError, match="sampling_params"):
        engine.generate(prompt="a", sampling_params=5)
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(input_ids=[[1, 2], "3"])
    with pytest.raises(ValueError, match="return_logprob"):
        engine.generate(prompt="a", return_logprob="yes")
    with pytest.raises(TypeError, match="no_such_keyword"):
        engine.generate(prompt="a", no_such_keyword=1)


def test_batch_with_one_sampling_params_dict_and_n(engine, expected) -> None:
    """EvolvingLMMs-Lab/lmms-eval#1423 and sgl-project/sglang#379: a list of prompts takes one
    sampling-params dict for all of them or one dict each, and ``n > 1`` returns ``n`` outputs
    per prompt, grouped by prompt as SGLang's tokenizer manager sends them (p0, p0, p1, p1)."""
    shared = engine.generate(prompt=["a", "b c", "d"], sampling_params={"max_new_tokens": 4})
    assert [o["text"] for o in shared] == [expected(4)] * 3
    each = engine.generate(
        prompt=["a", "b c"], sampling_params=[{"max_new_tokens": 1}, {"max_new_tokens": 5}]
    )
    assert [o["text"] for o in each] == [expected(1), expected(5)]
    n2 = engine.generate(prompt=["a", "b c"], sampling_params={"max_new_tokens": 2, "n": 2})
    assert len(n2) == 4 and [o["meta_info"]["prompt_tokens"] for o in n2] == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="sampling_params"):
        engine.generate(prompt=["a", "b"], sampling_params=[{"max_new_tokens": 1}])


def test_sync_generate_inside_a_running_event_loop(engine, expected) -> None:
    """sgl-project/sglang#185 (starting / using the runtime from a Jupyter notebook, whose event
    loop is already running): the blocking ``generate`` works when called from inside a running
    loop, as does ``async_generate`` awaited on that loop."""

    async def cell() -> tuple[str, str]:
        sync = engine.generate(prompt="a", sampling_params={"max_new_tokens": 3})["text"]
        out = await engine.async_generate(prompt="a", sampling_params={"max_new_tokens": 3})
        return sync, out["text"]

    assert asyncio.run(cell()) == (expected(3), expected(3))


def test_sglang_server_arg_name_and_two_engines(model, engine, expected) -> None:
    """sgl-project/sglang#2968 (``sgl.Engine(**kwargs)`` with SGLang's ServerArgs names):
    ``skip_server_warmup`` (the CLI already took ``--skip-server-warmup``) was an "Unknown Engine
    argument"; a second engine in the same process serves alongside the first, and shutting it
    down leaves the first working and no child process behind."""
    second = start_fake_engine(model, skip_server_warmup=True)
    try:
        assert second.server_args.skip_warmup is True
        assert second.generate(prompt="b", sampling_params={"max_new_tokens": 2})["text"] == expected(2)
    finally:
        second.shutdown()
    assert not second._procs.scheduler.is_alive() and not second._procs.detokenizer.is_alive()
    assert engine.generate(prompt="a", sampling_params={"max_new_tokens": 2})["text"] == expected(2)
    with pytest.raises(ValueError, match="skip_server_warmup"):
        start_fake_engine(model, skip_server_warmup=True, skip_warmup=False)


def _hold_stream_then_shut_down(eng: Any) -> tuple[Any, dict[str, Any]]:
    """Stream a held request (``FAKE_HOLD_ON_TEXT=HOLD-THIS``) on another thread, shut ``eng``
    down after its first chunk, join the thread; returns it and ``{"result": "finished" or the
    exception the stream raised}``."""
    import threading

    got: dict[str, Any] = {}
    first = threading.Event()

    def run_held() -> None:
        async def consume() -> None:
            stream = await eng.async_generate(
                prompt="HOLD-THIS", sampling_params={"max_new_tokens": 50}, stream=True
            )
            async for _ in stream:
                first.set()

        try:
            asyncio.run(consume())
            got["result"] = "finished"
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            got["result"] = e

    worker = threading.Thread(target=run_held, daemon=True)
    worker.start()
    try:
        assert first.wait(60), "the held request never produced its first chunk"
    finally:
        eng.shutdown()
    worker.join(30)
    return worker, got


def _calls_after_shutdown(eng: Any) -> list[tuple[str, str]]:
    """Each public call on the shut-down ``eng``: ``(call, "TypeName: message")`` of what it
    raised, or ``(call, "returned")``."""

    async def later(stream: bool) -> Any:
        out = await eng.async_generate(prompt="a", sampling_params={"max_new_tokens": 2}, stream=stream)
        return [c async for c in out] if stream else out

    calls = {
        "generate": lambda: eng.generate(prompt="a", sampling_params={"max_new_tokens": 2}),
        "generate(stream)": lambda: list(
            eng.generate(prompt="a", sampling_params={"max_new_tokens": 2}, stream=True)
        ),
        "async_generate": lambda: asyncio.run(asyncio.wait_for(later(False), 30)),
        "async_generate(stream)": lambda: asyncio.run(asyncio.wait_for(later(True), 30)),
        "get_server_info": eng.get_server_info,
        "flush_cache": eng.flush_cache,
    }
    out = []
    for name, call in calls.items():
        try:
            call()
            out.append((name, "returned"))
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            out.append((name, f"{type(e).__name__}: {e}"))
    return out


@pytest.fixture(scope="module")
def shutdown_rounds(model: Path) -> list[dict[str, Any]]:
    """Three rounds of: an Engine streams a held request (``FAKE_HOLD_ON_TEXT=HOLD-THIS``) on
    another thread, ``shutdown()`` comes after its first chunk, then every public call is made
    on the shut-down engine; the engine is dropped and collected. Per round, as plain data (no
    reference to the engine, its tasks or their exceptions survives the round):
    ``worker_alive``, ``result`` (``"finished"`` or ``"TypeName: message"`` of what the stream
    raised), ``after`` (:func:`_calls_after_shutdown`) and ``never_retrieved`` (asyncio's "Task
    exception was never retrieved" messages logged by the round's garbage collection). Three
    rounds: the stream's task may end before or after ``shutdown()`` fails its future."""
    rounds: list[dict[str, Any]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_HOLD_ON_TEXT", "HOLD-THIS")
        for _ in range(3):
            records: list[logging.LogRecord] = []
            handler = logging.Handler()
            handler.emit = records.append  # type: ignore[method-assign]
            logging.getLogger("asyncio").addHandler(handler)
            try:
                eng = start_fake_engine(model)
                worker, got = _hold_stream_then_shut_down(eng)
                result = got.get("result", "no result: the stream is still running")
                r: dict[str, Any] = {
                    "worker_alive": worker.is_alive(),
                    "result": result if isinstance(result, str) else f"{type(result).__name__}: {result}",
                    "after": _calls_after_shutdown(eng),
                }
                eng.shutdown()  # idempotent
                del eng, worker, got, result
                for _ in range(3):
                    gc.collect()
            finally:
                logging.getLogger("asyncio").removeHandler(handler)
            r["never_retrieved"] = [m.getMessage() for m in records if "never retrieved" in m.getMessage()]
            rounds.append(r)
    return rounds


def test_calls_after_or_during_shutdown_raise_instead_of_hanging(shutdown_rounds) -> None:
    """``generate`` / ``async_generate`` (plain and streamed) on an Engine after ``shutdown()``
    raise ``RuntimeError`` at once (``async_generate`` used to wait forever on the stopped loop),
    and a request still running when another thread shuts the engine down fails the same way
    instead of blocking its caller."""
    for r in shutdown_rounds:
        assert not r["worker_alive"], "a streaming request still blocks after shutdown()"
        assert r["result"].startswith("RuntimeError: ") and "shut down" in r["result"], r["result"]
        for name, outcome in r["after"]:
            assert outcome.startswith("RuntimeError: ") and "shut down" in outcome, (name, outcome)


def test_call_ended_by_shutdown_leaves_no_unretrieved_task_exception(shutdown_rounds) -> None:
    """A streamed request that ``shutdown()`` ends from another thread leaves no asyncio task
    whose exception nobody read: asyncio logs "Task exception was never retrieved" when such a
    task is collected, formatting a traceback inside the garbage collector, which on CPython
    3.11 before 3.11.8 can break every later ``ast.parse`` of the process ("AST constructor
    recursion depth mismatch")."""
    assert [m for r in shutdown_rounds for m in r["never_retrieved"]] == []


def test_stream_step_asked_for_while_shutdown_runs_ends(model, tmp_path: Path, monkeypatch) -> None:
    """A stream iterated on another thread (``generate(stream=True)`` and ``async_generate(
    stream=True)``) that asks for its next chunk while ``shutdown()`` runs ends with the
    shutdown's ``RuntimeError``. The step's call had passed the "shut down?" check but was not yet
    among the calls ``shutdown()`` fails when ``shutdown()`` failed them and stopped the loop: the
    step was queued on the stopped loop and its consumer waited forever (seen once as a streaming
    thread still alive 30 s after ``shutdown()``). The window is held open here: each consumer's
    step waits inside it until ``shutdown()`` has returned."""
    import threading

    from server_fixture import hold_until_tag
    from sglang_v4.entrypoints import engine as engine_module

    eng = start_fake_engine(model)
    shut_down = threading.Event()
    settled = engine_module._settled
    consumers: dict[str, dict[str, Any]] = {}

    def step_held_in_window(coro: Any) -> Any:
        # a consumer's step after its first chunk: held until shutdown() returned (bounded, so code
        # that runs this inside a lock shutdown() needs is slow, not deadlocked)
        me = next((c for c in consumers.values() if c["thread"] is threading.current_thread()), None)
        if me is not None and me["first"].is_set() and not me["in_window"].is_set():
            me["in_window"].set()
            shut_down.wait(10)
        return settled(coro)

    def consume(name: str, prompt: str) -> None:
        me = consumers[name]
        try:
            if name == "generate":
                for _ in eng.generate(prompt=prompt, sampling_params={"max_new_tokens": 50}, stream=True):
                    me["first"].set()
            else:

                async def consume_async() -> None:
                    stream = await eng.async_generate(
                        prompt=prompt, sampling_params={"max_new_tokens": 50}, stream=True
                    )
                    async for _ in stream:
                        me["first"].set()

                asyncio.run(consume_async())
            me["result"] = "finished"
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            me["result"] = f"{type(e).__name__}: {e}"

    monkeypatch.setattr(engine_module, "_settled", step_held_in_window)
    for name in ("generate", "async_generate"):
        prompt = f"Hi {hold_until_tag(tmp_path / name)}"  # held after its first token, never released
        thread = threading.Thread(target=consume, args=(name, prompt), daemon=True)
        consumers[name] = {"thread": thread, "first": threading.Event(), "in_window": threading.Event()}
    try:
        for c in consumers.values():
            c["thread"].start()
        for name, c in consumers.items():
            assert c["first"].wait(60), f"{name}: the held request never produced its first chunk"
            assert c["in_window"].wait(30), f"{name}: the consumer never asked for its second chunk"
    finally:
        eng.shutdown()
        shut_down.set()
    for name, c in consumers.items():
        c["thread"].join(10)
        assert not c["thread"].is_alive(), f"{name}: a stream step asked for during shutdown() waits forever"
        result = c.get("result", "")
        assert result.startswith("RuntimeError: ") and "shut down" in result, (name, result)


def test_script_ending_with_an_open_stream_exits(model, tmp_path: Path) -> None:
    """A script that ends without ``shutdown()`` while a streamed ``generate`` is still open
    exits promptly and cleanly: the open stream's cleanup used to wait forever on the engine's
    event loop, frozen at interpreter exit, and the child processes killed first were logged as
    a backend crash."""
    import subprocess
    import sys

    from server_fixture import REPO

    script = tmp_path / "open_stream.py"
    script.write_text(
        "import sys\n"
        "from sglang_v4 import Engine\n"
        "if __name__ == '__main__':\n"
        "    engine = Engine(model_path=sys.argv[1])\n"
        "    stream = engine.generate(prompt='HOLD-THIS', sampling_params={'max_new_tokens': 50}, stream=True)\n"
        "    print('first chunk', 'meta_info' in next(stream), flush=True)\n"
    )
    from server_fixture import TEST_DIR

    env = dict(
        os.environ,
        SGLANG_V4_SCHEDULER_CLASS="server_fixture:FakeScheduler",
        FAKE_HOLD_ON_TEXT="HOLD-THIS",
        # the scheduler child imports server_fixture: the test directory on its path, as CI runs it
        PYTHONPATH=os.pathsep.join([str(TEST_DIR), os.environ.get("PYTHONPATH", "")]),
    )
    try:
        p = subprocess.run(
            [sys.executable, str(script), str(model)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=200,  # an Engine start-up, one chunk, the exit: generous for a loaded machine
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the script did not exit: {str(e.stderr)[-2000:]}")
    assert p.returncode == 0 and "first chunk True" in p.stdout, p.stderr[-3000:]
    assert "died" not in p.stderr and "crashed" not in p.stderr, p.stderr[-3000:]


def test_engine_incremental_streaming_output(model: Path, expected, tmp_path: Path) -> None:
    """SGLang's ``Engine(incremental_streaming_output=True)`` (was refused): stream chunks carry only
    their new text and ``output_ids`` (sync and async iterators); joined they are the whole output."""
    from server_fixture import hold_until_tag, release_later

    with start_fake_engine(model, incremental_streaming_output=True) as eng:
        # held after its first token until the file exists: at least two chunks to join, however
        # a loaded machine merges the outputs that arrived meanwhile
        release = tmp_path / "release"
        prompt = f"Hi {hold_until_tag(release)}"
        it = eng.generate(prompt=prompt, sampling_params={"max_new_tokens": 8}, stream=True)
        timer = release_later(release)
        chunks = [next(it)]
        timer.cancel()
        assert chunks[0]["text"] == expected(1) and len(chunks[0]["output_ids"]) == 1
        release.touch()
        chunks += list(it)
        assert len(chunks) > 1
        assert "".join(c["text"] for c in chunks) == expected(8)
        assert sum(len(c["output_ids"]) for c in chunks) == 8

        async def collect() -> list[dict]:
            it = await eng.async_generate(prompt="Hi", sampling_params={"max_new_tokens": 8}, stream=True)
            return [c async for c in it]

        chunks = asyncio.run(collect())
        assert "".join(c["text"] for c in chunks) == expected(8)
        assert sum(len(c["output_ids"]) for c in chunks) == 8


def _sglang_engine_sources() -> Path:
    """The installed ``sglang`` package's ``srt`` directory (SGLang's own source: the oracle of
    the Engine's method list and of its embedding error text)."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("sglang is not installed: no SGLang Engine to compare with")
    return Path(next(iter(spec.submodule_search_locations))) / "srt"


def _sglang_engine_public_methods(srt: Path) -> set[str]:
    """Public method names of SGLang's ``Engine`` and the classes it derives from (those defined
    in ``srt/entrypoints/``), read with ``ast``: importing the module needs SGLang's GPU stack."""
    import ast

    classes: dict[str, ast.ClassDef] = {}
    for path in (srt / "entrypoints").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, node)
    names: set[str] = set()
    todo = ["Engine"]
    while todo:
        cls = classes.get(todo.pop())
        if cls is None:
            continue
        todo += [b.id for b in cls.bases if isinstance(b, ast.Name)]
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_"):
                names.add(f.name)
    assert {"generate", "encode", "release_memory_occupation"} <= names, sorted(names)
    return names


def test_every_sglang_engine_method_exists_or_says_why(engine, expected) -> None:
    """A script written for SGLang's ``Engine`` calling ``encode`` / ``rerank`` /
    ``release_memory_occupation`` / ``load_lora_adapter`` / ``get_all_child_pids`` met a bare
    ``AttributeError: 'Engine' object has no attribute ...`` (a typo and a missing feature read
    the same). Every public method of SGLang 0.5.23's ``Engine`` is now either a method here or
    an ``AttributeError`` naming it with the reason (``hasattr`` stays ``False``); ``encode``,
    ``async_encode`` and ``rerank`` raise SGLang's own ``ValueError`` text for a generation model
    (read from its ``TokenizerManager``) and change nothing."""
    import ast

    import psutil
    from sglang_v4 import Engine
    from sglang_v4.entrypoints.engine_sglang_methods import UNSUPPORTED_ENGINE_METHODS

    srt = _sglang_engine_sources()
    for name in sorted(_sglang_engine_public_methods(srt)):
        if name in UNSUPPORTED_ENGINE_METHODS:
            assert not hasattr(engine, name), name
            with pytest.raises(AttributeError) as err:
                getattr(engine, name)
            assert f"Engine.{name} " in str(err.value) and UNSUPPORTED_ENGINE_METHODS[name] in str(err.value)
        else:
            assert callable(getattr(Engine, name, None)), f"SGLang's Engine.{name} is neither here nor listed"
    with pytest.raises(AttributeError, match="^'Engine' object has no attribute 'genrate'$"):
        engine.genrate  # noqa: B018 - a typo reads as Python's own message

    tree = ast.parse((srt / "managers" / "tokenizer_manager.py").read_text())
    sglang_texts = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and "not appear to be an embedding" in n.value
    ]
    assert len(sglang_texts) == 1, sglang_texts
    for call in (
        lambda: engine.encode("hi"),
        lambda: engine.encode(["a", "b"]),
        lambda: engine.rerank([["q", "d"]]),
        lambda: asyncio.run(engine.async_encode("hi")),
    ):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == sglang_texts[0]
    assert engine.generate(prompt="a", sampling_params={"max_new_tokens": 2})["text"] == expected(2)

    pids = engine.get_all_child_pids()
    assert len(pids) == len(set(pids)) == 2, pids  # scheduler and detokenizer (tp_size 1)
    for pid in pids:
        child = psutil.Process(pid)
        assert child.ppid() == os.getpid() and child.is_running(), pid
        assert "resource_tracker" not in " ".join(child.cmdline()), child.cmdline()
