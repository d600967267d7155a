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
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import server_fixture as sf  # noqa: E402
from sglang_v4 import bench_serving as bs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEP_S = 0.01


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
        # one token per 10 ms scheduler step (two requests share a step)
        assert STEP_S * 1e3 * 0.8 <= res["median_tpot_ms"] <= STEP_S * 1e3 * 5
        assert all(len(x) == n_out - 1 for x in res["itls"])
    else:
        assert res["ttfts"] == res["e2e_latencies"]
