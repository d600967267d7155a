"""bench_serving against a stub HTTP server that replays SGLang's and OpenAI's response shapes.

The stub (``bench_stub_server.StubServer``: aiohttp.web in a thread) streams exactly what the real servers send:
SGLang ``/generate``: ``data: {"text": <cumulative>, "output_ids", "meta_info": {...}, "index": 0}``
lines and ``data: [DONE]``; OpenAI ``/v1/completions`` and ``/v1/chat/completions``: chunk
objects, a finish chunk, a usage chunk with ``choices: []`` when ``stream_options.include_usage``,
and ``data: [DONE]``. The OpenAI shapes are cross-checked with the official ``openai`` client
(an independent parser). Tokens are emitted on a known schedule (first token after
``ttft_s``, then one chunk every ``chunk_s``), so timing metrics have an independent oracle.
Summary numbers are recomputed in the tests from the per-request records with numpy.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_stub_server import MODEL, StubConfig, StubServer, token_text
from sglang_v4 import bench_serving as bs


@pytest.fixture(scope="module")
def tok() -> bs.BenchTokenizer:
    return bs.get_tokenizer(None)


def _args(url: str, tmp_path: Path, **kw: Any) -> Any:
    base = dict(
        base_url=url,
        dataset_name="random-ids",
        random_input_len=24,
        random_output_len=6,
        random_range_ratio=1.0,
        num_prompts=6,
        output_file=str(tmp_path / "out.jsonl"),
        output_details=True,
        disable_tqdm=True,
        ready_check_timeout_sec=10,
    )
    base.update(kw)
    return bs.make_args(**base)


def recompute(res: dict[str, Any]) -> dict[str, float]:
    """Independent recomputation of the summary from the per-request lists."""
    ok = [i for i, s in enumerate(res["successes"]) if s]
    dur = res["duration"]
    ttft = np.array([res["ttfts"][i] for i in ok])
    e2e = np.array([res["e2e_latencies"][i] for i in ok])
    outl = np.array([res["output_lens"][i] for i in ok])
    inl = np.array([res["input_lens"][i] for i in ok])
    itl = np.array([x for i in ok for x in res["itls"][i]])
    tpot = np.array([(e2e[j] - ttft[j]) / (outl[j] - 1) for j in range(len(ok)) if outl[j] > 1])
    cached = sum(res["cached_tokens"][i] for i in ok)
    return {
        "completed": len(ok),
        "failed": len(res["successes"]) - len(ok),
        "total_input_tokens": int(inl.sum()),
        "total_output_tokens": int(outl.sum()),
        "request_throughput": len(ok) / dur,
        "input_throughput": inl.sum() / dur,
        "output_throughput": outl.sum() / dur,
        "total_throughput": (inl.sum() + outl.sum()) / dur,
        "mean_ttft_ms": ttft.mean() * 1e3,
        "median_ttft_ms": np.median(ttft) * 1e3,
        "p90_ttft_ms": np.percentile(ttft, 90) * 1e3,
        "p99_ttft_ms": np.percentile(ttft, 99) * 1e3,
        "mean_tpot_ms": tpot.mean() * 1e3,
        "median_tpot_ms": np.median(tpot) * 1e3,
        "p99_tpot_ms": np.percentile(tpot, 99) * 1e3,
        "mean_itl_ms": itl.mean() * 1e3,
        "median_itl_ms": np.median(itl) * 1e3,
        "p90_itl_ms": np.percentile(itl, 90) * 1e3,
        "p99_itl_ms": np.percentile(itl, 99) * 1e3,
        "mean_e2e_latency_ms": e2e.mean() * 1e3,
        "median_e2e_latency_ms": np.median(e2e) * 1e3,
        "p99_e2e_latency_ms": np.percentile(e2e, 99) * 1e3,
        "concurrency": e2e.sum() / dur,
        "total_cached_tokens": cached,
        "cache_hit_rate": cached / inl.sum(),
    }


SGLANG_JSONL_KEYS = {
    "backend",
    "dataset_name",
    "request_rate",
    "max_concurrency",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "duration",
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "total_output_tokens_retokenized",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
    "p90_e2e_latency_ms",
    "p99_e2e_latency_ms",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p90_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p90_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p90_itl_ms",
    "p99_itl_ms",
    "concurrency",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "generated_texts",
    "errors",
}


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai", "sglang-oai-chat", "vllm"])
def test_stream_parsing_metrics_and_jsonl(backend: str, tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    # 50 ms per token: the 0.8 lower bounds below leave 10 ms a token for a loaded client that
    # reads an event late (the next one then looks early); at 10 ms a token they left 2 ms
    cfg = StubConfig(ttft_s=0.04, chunk_s=0.05, tokens_per_chunk=2, cached_fraction=0.5)
    with StubServer(cfg) as srv:
        res = bs.run_benchmark(
            _args(srv.url, tmp_path, backend=backend, max_concurrency=3, flush_cache=True), tok=tok
        )
        state = srv.state
    n_out = 6
    expected_text = "".join(token_text(i) for i in range(n_out))
    assert res["completed"] == 6 and res["failed"] == 0
    assert res["generated_texts"] == [expected_text] * 6
    assert res["output_lens"] == [n_out] * 6
    # every token after the first has one ITL entry (chunks of 2 tokens split evenly)
    assert [len(x) for x in res["itls"]] == [n_out - 1] * 6
    # input lengths are the server-reported prompt tokens (the 6 measured requests after warm-up)
    assert sorted(res["input_lens"]) == sorted(state.prompt_tokens[1:])
    assert res["cached_tokens"] == [int(p * 0.5) for p in res["input_lens"]]
    # warm-up, then the flush, then the measured requests
    assert state.events[:2] == ["gen", "flush"] and state.events.count("flush") == 1
    assert state.max_in_flight <= 3
    # timing against the stub's schedule: first token >= ttft_s, later tokens ~chunk_s apart
    assert min(res["ttfts"]) >= cfg.ttft_s * 0.9
    assert res["median_itl_ms"] >= cfg.chunk_s * 1e3 * 0.8
    assert res["mean_tpot_ms"] >= cfg.chunk_s * 1e3 * 0.8
    # request shapes
    path, body = state.requests[-1]
    assert path == bs.API_PATHS[backend]
    if backend == "sglang":
        assert isinstance(body["text"], str) and body["stream"] is True
        assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": n_out, "ignore_eos": True}
    else:
        assert body["model"] == MODEL and body["stream"] is True and body["max_tokens"] == n_out
        assert body["stream_options"] == {"include_usage": True} and body["ignore_eos"] is True
    # summary numbers consistent with the per-request records
    ref = recompute(res)
    for k, v in ref.items():
        assert res[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k
    # JSONL line
    lines = Path(tmp_path / "out.jsonl").read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert SGLANG_JSONL_KEYS <= rec.keys()
    assert rec["backend"] == backend and rec["completed"] == 6
    assert rec["ttfts"] == res["ttfts"] and rec["output_lens"] == res["output_lens"]


@pytest.mark.parametrize("backend", ["sglang", "sglang-oai", "sglang-oai-chat"])
def test_non_streaming(backend: str, tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    with StubServer(StubConfig(ttft_s=0.02, chunk_s=0.002)) as srv:
        res = bs.run_benchmark(
            _args(srv.url, tmp_path, backend=backend, disable_stream=True, num_prompts=3), tok=tok
        )
        assert srv.state.requests[-1][1]["stream"] is False
    assert res["completed"] == 3
    assert res["generated_texts"] == ["".join(token_text(i) for i in range(6))] * 3
    assert res["output_lens"] == [6] * 3
    assert res["ttfts"] == res["e2e_latencies"]  # no stream: TTFT is the whole latency


def test_failures_are_counted_and_reported(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    # request count 1 is the warm-up; 3 and 6 get HTTP 400, 5 an error event mid-stream
    cfg = StubConfig(fail_every=3, midstream_error_every=5, ttft_s=0.005, chunk_s=0.001)
    with StubServer(cfg) as srv:
        res = bs.run_benchmark(_args(srv.url, tmp_path, num_prompts=6, max_concurrency=1), tok=tok)
    assert res["completed"] == 3 and res["failed"] == 3
    errors = [e for e, ok in zip(res["errors"], res["successes"]) if not ok]
    assert sum("HTTP 400" in e and "stub rejects" in e for e in errors) == 2
    assert sum("stub midstream failure" in e for e in errors) == 1
    ref = recompute(res)
    assert res["completed"] == ref["completed"] and res["total_output_tokens"] == ref["total_output_tokens"]


def test_openai_client_parses_the_stub_identically(tok: bs.BenchTokenizer) -> None:
    """The official openai client (independent parser) reads the stub's OAI streams; our client must
    extract the same text and usage from them."""
    openai = pytest.importorskip("openai")
    with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001, cached_fraction=0.25)) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
        text, usage = "", None
        for ch in client.completions.create(
            model=MODEL, prompt="a b c", max_tokens=5, stream=True, stream_options={"include_usage": True}
        ):
            if ch.choices:
                text += ch.choices[0].text
            usage = ch.usage or usage
        chat_text, chat_usage = "", None
        for ch in client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "a b c"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        ):
            if ch.choices and ch.choices[0].delta.content:
                chat_text += ch.choices[0].delta.content
            chat_usage = ch.usage or chat_usage

        async def ours() -> tuple[bs.RequestFuncOutput, bs.RequestFuncOutput]:
            import aiohttp

            async with aiohttp.ClientSession() as s:
                a = await bs.request_openai_completions(
                    s,
                    bs.RequestFuncInput("a b c", srv.url + "/v1/completions", 0, 5, MODEL),
                    bs.ClientOptions(),
                )
                b = await bs.request_openai_chat(
                    s,
                    bs.RequestFuncInput("a b c", srv.url + "/v1/chat/completions", 0, 5, MODEL),
                    bs.ClientOptions(backend="sglang-oai-chat"),
                )
                return a, b

        a, b = asyncio.run(ours())
    assert a.success and b.success
    assert a.generated_text == text and b.generated_text == chat_text
    assert (a.prompt_len, a.output_len, a.cached_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.prompt_tokens_details.cached_tokens,
    )
    assert (b.prompt_len, b.output_len) == (chat_usage.prompt_tokens, chat_usage.completion_tokens)


def test_poisson_arrivals_follow_the_seeded_schedule(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    rate, n, seed = 25.0, 8, 7
    with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001)) as srv:
        res = bs.run_benchmark(
            _args(srv.url, tmp_path, request_rate=rate, num_prompts=n, seed=seed, random_output_len=2),
            tok=tok,
        )
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
    starts = np.array(res["start_times"])
    # launch i happens after sleeping gaps[:i]; the client adds only small overheads
    offs = starts - starts[0]
    expect = np.concatenate([[0.0], np.cumsum(gaps)])
    assert np.all(offs >= expect - 0.005)
    assert np.all(offs <= expect + 0.25)


def test_generated_shared_prefix_and_multi_turn(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = bs.sample_generated_shared_prefix_requests(tok, 3, 4, 40, 8, 5, 1.0, rng, ordered=True)
    assert len(rows) == 12
    for g in range(3):
        heads = {r.prompt.split("\n\n")[0] for r in rows[g * 4 : (g + 1) * 4]}  # type: ignore[union-attr]
        assert len(heads) == 1  # one shared system prompt per group
    assert len({r.prompt.split("\n\n")[0] for r in rows}) == 3  # type: ignore[union-attr]
    assert all(abs(r.prompt_len - 49) <= 4 for r in rows)  # 40 + 8 tokens + separator, re-tokenized

    # multi-turn: chat backend sends growing message history; native backend a growing text
    for backend in ("sglang-oai-chat", "sglang"):
        with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001)) as srv:
            res = bs.run_benchmark(
                _args(
                    srv.url,
                    tmp_path,
                    backend=backend,
                    dataset_name="generated-shared-prefix",
                    gsp_num_groups=2,
                    gsp_prompts_per_group=2,
                    gsp_system_prompt_len=30,
                    gsp_question_len=6,
                    gsp_output_len=3,
                    gsp_num_turns=3,
                    warmup_requests=0,
                ),
                tok=tok,
            )
            reqs = [b for _, b in srv.state.requests]
        assert res["completed"] == 12  # 4 conversations x 3 turns
        out_text = "".join(token_text(i) for i in range(3))
        if backend == "sglang-oai-chat":
            lengths = sorted(len(b["messages"]) for b in reqs)
            assert lengths == [1] * 4 + [3] * 4 + [5] * 4
            for b in reqs:
                assert [m["role"] for m in b["messages"]] == ["user", "assistant"] * (
                    len(b["messages"]) // 2
                ) + ["user"]
                assert all(m["content"] == out_text for m in b["messages"] if m["role"] == "assistant")
        else:
            texts = [b["text"] for b in reqs]
            firsts = [t for t in texts if out_text not in t]
            assert len(firsts) == 4
            for t in texts:
                if t not in firsts:
                    assert any(t.startswith(f + out_text + "\n\n") for f in firsts)


def test_sharegpt_local_file_and_errors(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    data = [
        {
            "id": str(i),
            "conversations": [
                {"from": "human", "value": f"question number {i} " * 3},
                {"from": "gpt", "value": "answer " * (i + 2)},
            ],
        }
        for i in range(10)
    ]
    data.append({"id": "short", "conversations": [{"from": "human", "value": "only one turn"}]})
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    rows = bs.sample_sharegpt_requests(tok, str(path), 5, np.random.default_rng(0))
    assert len(rows) == 5
    for r in rows:
        assert r.prompt.startswith("question number")  # type: ignore[union-attr]
        assert r.prompt_len == len(tok.encode(r.prompt))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dataset_path"):
        bs.sample_sharegpt_requests(tok, str(tmp_path / "missing.json"), 5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="dataset_path"):
        bs.sample_sharegpt_requests(tok, "", 5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="range ratio"):
        bs.compute_random_lens(10, 1.5, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown option"):
        bs.make_args(not_a_flag=1)


def test_random_lengths(tok: bs.BenchTokenizer) -> None:
    rows = bs.sample_random_requests(tok, 100, 10, 20, 0.5, np.random.default_rng(3), random_sample=False)
    assert all(5 <= r.output_len <= 10 for r in rows)
    assert all(40 <= r.prompt_len <= 104 for r in rows)  # re-tokenized text stays near its target
    ids_rows = bs.sample_random_requests(
        tok, 64, 8, 5, 1.0, np.random.default_rng(3), random_sample=False, return_text=False
    )
    assert all(isinstance(r.prompt, list) and len(r.prompt) == 64 == r.prompt_len for r in ids_rows)
    special = set(tok.inner.get_added_tokens_decoder())
    assert not any(t in special for r in ids_rows for t in r.prompt)  # type: ignore[union-attr]


def test_cli_prints_the_sglang_summary(tmp_path: Path) -> None:
    with StubServer(StubConfig(ttft_s=0.002, chunk_s=0.001)) as srv:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "sglang_v4.bench_serving",
                "--base-url",
                srv.url,
                "--dataset-name",
                "random-ids",
                "--random-input-len",
                "16",
                "--random-output-len",
                "4",
                "--num-prompts",
                "4",
                "--output-file",
                str(tmp_path / "cli.jsonl"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for label in (
        "Serving Benchmark Result",
        "Successful requests:",
        "Request throughput (req/s):",
        "Input token throughput (tok/s):",
        "Output token throughput (tok/s):",
        "Total token throughput (tok/s):",
        "Concurrency:",
        "Median E2E Latency (ms):",
        "Mean TTFT (ms):",
        "P90 TTFT (ms):",
        "P99 TTFT (ms):",
        "Mean TPOT (ms):",
        "P99 ITL (ms):",
        "Total cached tokens:",
    ):
        assert label in out, label
    assert "it/s]" in proc.stderr or "4/4" in proc.stderr  # tqdm bar
    rec = json.loads((tmp_path / "cli.jsonl").read_text())
    assert rec["completed"] == 4 and "ttfts" not in rec  # details only with --output-details
    assert f"{'Successful requests:':<40} {4:<10}" in out


def test_cli_unreachable_server_and_bad_args(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert bs.main(["--base-url", url, "--ready-check-timeout-sec", "1", "--dataset-name", "random-ids"]) == 1
    assert "not ready" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bs.main(["--base-url", url, "--num-prompts", "0", "--ready-check-timeout-sec", "0"])
    assert e.value.code == 2 and "num_prompts" in capsys.readouterr().err


def test_busy_flush_is_retried(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001, flush_busy_times=2)) as srv:
        res = bs.run_benchmark(_args(srv.url, tmp_path, num_prompts=2, flush_cache=True), tok=tok)
        assert srv.state.events[:4] == ["gen", "flush-busy", "flush-busy", "flush"]
    assert res["completed"] == 2
    with StubServer(StubConfig(flush_busy_times=10**6)) as srv:
        with pytest.raises(bs.requests.HTTPError, match="400"):
            bs.flush_server_cache(srv.url, "sglang", {}, timeout_s=0.5)


def test_tokenizer_resolution(tmp_path: Path, tok: bs.BenchTokenizer) -> None:
    import shutil

    src = Path(bs.default_tokenizer_path())
    d = tmp_path / "model"
    d.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(src.parent / f, d / f)
    text = "Hello, world! 你好"
    for t in (bs.get_tokenizer(str(d)), bs.get_tokenizer(str(d / "tokenizer.json"))):
        assert t.encode(text) == tok.encode(text) and t.decode(t.encode(text)) == text
    with pytest.raises(ValueError, match="tokenizer"):
        bs.get_tokenizer(str(tmp_path / "missing-dir"))
    with StubServer() as srv:
        # /model_info names a path that does not exist here -> the packaged V4 tokenizer (None)
        assert bs.resolve_model_and_tokenizer(srv.url, None, None, {}) == (MODEL, None)
        assert bs.resolve_model_and_tokenizer(srv.url, "m", str(d), {}) == ("m", str(d))


def test_logprob_flags_reach_the_payload(tok: bs.BenchTokenizer, tmp_path: Path) -> None:
    with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001)) as srv:
        kw = dict(num_prompts=1, warmup_requests=0, return_logprob=True, top_logprobs_num=3)
        bs.run_benchmark(_args(srv.url, tmp_path, backend="sglang", **kw), tok=tok)
        bs.run_benchmark(_args(srv.url, tmp_path, backend="sglang-oai", **kw), tok=tok)
        native, oai = (b for _, b in srv.state.requests)
    assert (native["return_logprob"], native["top_logprobs_num"], native["logprob_start_len"]) == (
        True,
        3,
        -1,
    )
    assert oai["logprobs"] == 3


def test_default_run_needs_no_dataset_and_writes_no_file(
    tok: bs.BenchTokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No dataset arguments (SGLang's default ``sharegpt`` without a file) runs on random ids of
    the ``--random-*`` lengths, and without ``--output-file`` nothing is written to the cwd."""
    monkeypatch.chdir(tmp_path)
    with StubServer(StubConfig(ttft_s=0.001, chunk_s=0.001)) as srv:
        args = bs.get_args_parser().parse_args(
            ["--base-url", srv.url, "--num-prompts", "3", "--random-input-len", "20", "--random-output-len", "4",
             "--random-range-ratio", "1.0", "--disable-tqdm"]
        )  # fmt: skip
        assert args.dataset_name == "sharegpt" and not args.dataset_path and args.output_file is None
        res = bs.run_benchmark(args, tok=tok)
    assert res["completed"] == 3 and res["failed"] == 0
    assert res["output_lens"] == [4] * 3  # the --random-output-len of the fallback dataset
    assert list(tmp_path.iterdir()) == []
