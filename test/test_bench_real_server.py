"""bench_serving / matrix / prefix_cache against the real HTTP server (``launch_server`` subprocess).

1. Real HTTP stack (tokenizer manager, ZMQ, detokenizer, FastAPI) with the model-free
   ``FakeScheduler`` of ``server_fixture`` (one token per 10 ms step, tokens of ``FAKE_TEXT``):
   every backend's parsed text must equal the independent decode of those tokens, token counts
   and prompt lengths must match, and TPOT must reflect the 10 ms step.
2. The embedded default model on CPU (small sizes): bench_serving through the CLI, a tiny matrix
   and a tiny prefix-cache comparison (radix on: cache hits; radix off: none).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import server_fixture as sf  # noqa: E402
from sglang_v4 import bench_serving as bs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: The fake model's step (seconds): at 30 ms the 0.8 lower bound on TPOT leaves a request 66 ms
#: for a first chunk read late (a stalled client, or a loaded server that merged the first
#: steps' tokens: either shortens latency - TTFT); at 10 ms it left 22 ms
STEP_S = 0.03


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_{name}_rs", ROOT / "benchmark" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tok() -> bs.BenchTokenizer:
    return bs.get_tokenizer(None)


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sf.ServerHandle]:
    root = tmp_path_factory.mktemp("fake")
    model = sf.make_fake_model_dir(root)
    h = sf.start_server(
        ["--model-path", str(model), "--device", "cpu", "--enable-cache-report"],
        sf.fake_env({"FAKE_STEP_SLEEP": str(STEP_S)}),
        root / "server.log",
    )
    yield h
    h.stop()


def _expected_text(n: int) -> str:
    """Independent decode of the first ``n`` tokens the FakeScheduler emits."""
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(bs.default_tokenizer_path())
    ids = t.encode(sf.FAKE_TEXT).ids
    return t.decode(ids[:n], skip_special_tokens=True)


@pytest.mark.parametrize(
    ("backend", "stream"),
    [
        ("sglang", True),
        ("sglang-oai", True),
        ("sglang-oai-chat", True),
        ("sglang", False),
        ("sglang-oai", False),
    ],
)
def test_real_http_stack_fake_model(
    fake_server: sf.ServerHandle, tok: bs.BenchTokenizer, backend: str, stream: bool
) -> None:
    n_out, n_in = 12, 32
    res = bs.run_benchmark(
        bs.make_args(
            base_url=fake_server.url,
            backend=backend,
            dataset_name="random-ids",
            random_input_len=n_in,
            random_output_len=n_out,
            random_range_ratio=1.0,
            num_prompts=4,
            max_concurrency=2,
            disable_tqdm=True,
            disable_stream=not stream,
            output_file="",
            flush_cache=True,
            tokenize_prompt=backend == "sglang",
        ),
        tok=tok,
    )
    assert res["completed"] == 4 and res["failed"] == 0, res["errors"]
    assert res["generated_texts"] == [_expected_text(n_out)] * 4
    assert res["output_lens"] == [n_out] * 4
    if backend != "sglang-oai-chat":  # chat adds the template's tokens
        assert res["input_lens"] == [n_in] * 4
    else:
        assert all(x > n_in for x in res["input_lens"])
    if stream:
        # one token per scheduler step (two requests share a step); the upper bound leaves room
        # for a loaded CI machine and still catches a unit error
        assert STEP_S * 1e3 * 0.8 <= res["median_tpot_ms"] <= STEP_S * 1e3 * 20
        if backend == "sglang":
            # meta_info.completion_tokens counts the tokens of every chunk: one ITL per token
            assert all(len(x) == n_out - 1 for x in res["itls"])
        else:
            # OpenAI chunks carry no token count: one ITL per text chunk, and a loaded server
            # may deliver two steps' tokens in one chunk (SGLang and vLLM do too)
            assert all(1 <= len(x) <= n_out - 1 for x in res["itls"])
    else:
        assert res["ttfts"] == res["e2e_latencies"]


# ----------------------------------------------------------------------------------------------
# The embedded default model on CPU (real scheduler, model, radix cache). Kept tiny: one decode
# step of the embedded model takes ~0.1-1 s on the shared 2-core CI box.
# ----------------------------------------------------------------------------------------------

pc = _load("prefix_cache")
matrix = _load("matrix")


@pytest.fixture(scope="module")
def real_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Two embedded-model servers started in parallel: radix cache on, and off."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("real")
    flags = {
        "on": ["--device", "cpu", "--enable-cache-report"],
        "off": ["--device", "cpu", "--disable-radix-cache"],
    }
    with ThreadPoolExecutor(2) as ex:
        futs = {k: ex.submit(pc.launch_server, v, root / f"server_{k}.log", 600) for k, v in flags.items()}
        started = {}
        errors = []
        for k, f in futs.items():
            try:
                started[k] = f.result()
            except Exception as e:  # noqa: BLE001 - stop the other server before failing
                errors.append(e)
    try:
        if errors:
            raise errors[0]
        yield {k: url for k, (_, url) in started.items()}
    finally:
        for proc, _ in started.values():
            pc.stop_server(proc)


@pytest.mark.slow
def test_cli_against_embedded_model(real_servers: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sglang_v4.bench_serving",
            "--base-url",
            real_servers["on"],
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            "24",
            "--random-output-len",
            "3",
            "--random-range-ratio",
            "1.0",
            "--num-prompts",
            "3",
            "--max-concurrency",
            "3",
            "--tokenize-prompt",
            "--output-details",
            "--output-file",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Serving Benchmark Result" in proc.stdout
    rec = json.loads(out.read_text())
    assert rec["completed"] == 3 and rec["failed"] == 0
    assert rec["input_lens"] == [24] * 3  # token ids sent, server-reported prompt_tokens
    assert rec["output_lens"] == [3] * 3  # ignore_eos
    assert all(t > 0 for t in rec["ttfts"]) and [len(x) for x in rec["itls"]] == [2] * 3


@pytest.mark.slow
def test_matrix_tiny_on_embedded_model(
    real_servers: dict[str, str], tmp_path: Path, tok: bs.BenchTokenizer
) -> None:
    rows = matrix.run_matrix(
        real_servers["on"], [1, 2], [16], [2], tmp_path, prompts_per_concurrency=1, tok=tok
    )
    assert [(r["concurrency"], r["completed"], r["failed"]) for r in rows] == [(1, 1, 0), (2, 2, 0)]
    res = matrix.analyze(rows)
    assert set(res["by_shape"]) == {(16, 2)}
    for p in matrix.plot(rows, tmp_path, res):
        assert p.stat().st_size > 0


@pytest.mark.slow
def test_prefix_cache_on_vs_off_embedded_model(real_servers: dict[str, str], tok: bs.BenchTokenizer) -> None:
    """One group of 3 prompts sharing a 300-token system prompt, sent one at a time after a flush:
    with the radix cache the 2nd and 3rd reuse one whole 256-token block; without it nothing."""
    common = dict(
        dataset_name="generated-shared-prefix",
        gsp_num_groups=1,
        gsp_prompts_per_group=3,
        gsp_system_prompt_len=300,
        gsp_question_len=8,
        gsp_output_len=2,
        max_concurrency=1,
        flush_cache=True,
        disable_tqdm=True,
        output_file="",
    )
    on = bs.run_benchmark(bs.make_args(base_url=real_servers["on"], **common), tok=tok)
    off = bs.run_benchmark(bs.make_args(base_url=real_servers["off"], **common), tok=tok)
    assert on["completed"] == off["completed"] == 3
    assert on["cached_tokens"] == [0, 256, 256]  # block-granular hits after the flush
    assert off["cached_tokens"] == [0, 0, 0]
    ratios = pc.compare(on, off)
    assert ratios["hit_rate_on"] == pytest.approx(512 / sum(on["input_lens"]))
    assert ratios["hit_rate_off"] == 0.0
