"""The twenty-sixth set of public bug reports on SGLang's native ``/generate`` sampling parameters
(non-finite values, degenerate ``top_p`` / ``temperature`` / ``min_p``, ``top_k`` past the
vocabulary in a mixed batch, half-precision logits, logprob requests that must not change what
is sampled) and on ``/abort_request``'s ``prefix`` flag, replayed against sglang-v4. Each test
names its report.

Fixtures: direct calls of ``SamplingParams`` and ``sample`` on seeded random logits, and the
in-process app of ``admin_app_testutil`` (a real ``TokenizerManager`` whose scheduler never
answers). Oracles: ``torch.argmax`` of the logits, float64 ``log_softmax`` references, seeded
draws of an unfiltered row or of the same call without logprobs, RFC 8259 (JSON has no ``NaN``
or ``Infinity``), the requests sent to the scheduler socket, and pydantic's lax ``int`` (how
SGLang's and vLLM's request models read an integer field).

Fault fixed here (BerriAI/litellm#1854): ``/generate`` (and the ``Engine``) refused an integral
float ``n`` such as ``2.0`` with "n must be in [1, 128]", though every other integer sampling
field reads ``2.0`` as 2; ``n`` now follows that rule, and a fractional ``n`` is a 400 saying it
must be an integer. Fault fixed here (Yelp/py_zipkin#63): a single prompt with a batch's
per-prompt list in ``return_logprob`` (``[false]`` turned logprobs on) or ``extra_key`` was
accepted; such a list is now a 400 naming the field. The other reports showed no fault and are
kept as regression guards.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from detokenizer_testutil import batch_str_out
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SAMPLING_EPS, SamplingParams

pytestmark = pytest.mark.timeout(300)
VOCAB = 1000  # the width of the random logits below
SEEDS = range(24)


def _params(**kw: Any) -> SamplingParams:
    """Verified, normalised ``SamplingParams`` of ``kw``."""
    p = SamplingParams(**kw)
    p.verify(VOCAB)
    p.normalize(None)
    return p


def _logits(rows: int = 4, scale: float = 8.0, seed: int = 0) -> torch.Tensor:
    """``[rows, VOCAB]`` float32 seeded Gaussian logits times ``scale``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, VOCAB, generator=g) * scale


def _draws(logits: torch.Tensor, params: list[SamplingParams], seed: int) -> torch.Tensor:
    """One ``sample`` call with a generator seeded ``seed`` per row."""
    gens = [torch.Generator().manual_seed(seed) for _ in params]
    out = sample(logits, params, [[] for _ in params], generators=gens)
    assert isinstance(out, torch.Tensor)
    return out


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` of ``admin_app_testutil``, native routes only (the
    scheduler never answers)."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("native26"), openai_routes=False) as pair:
        yield pair


def _headers() -> dict[str, str]:
    from admin_app_testutil import ADMIN_KEY

    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def _refused(client: Any, body: dict[str, Any]) -> Any:
    """``POST /generate`` of ``body``, expected to be answered before the scheduler (which never
    answers here): a request that was accepted fails the test after 10 s instead of hanging."""
    import threading

    got: list[Any] = []
    t = threading.Thread(
        target=lambda: got.append(client.post("/generate", json=body, headers=_headers())), daemon=True
    )
    t.start()
    t.join(10)
    assert got, f"accepted (sent to the scheduler) instead of refused: {body}"
    return got[0]


# --------------------------------------------------------------------------- non-finite values
@pytest.mark.parametrize(
    "field",
    ["temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"],
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_tensorrt_llm_17158_non_finite_sampling_values_are_refused(field: str, value: float) -> None:
    """NVIDIA/TensorRT-LLM#17158: ``SamplingParams`` accepted ``NaN`` for ``top_p``, ``min_p``
    and ``temperature`` (every range comparison with NaN is false, so NaN passed them all).
    Expected: a non-finite value of any float sampling field is a ``ValueError`` naming that
    field (each field's documented range is finite)."""
    with pytest.raises(ValueError, match=field):
        _params(**{field: value})


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_tensorrt_llm_17158_non_finite_json_literals_are_a_400(app: tuple[Any, Any], literal: str) -> None:
    """NVIDIA/TensorRT-LLM#17158 over HTTP: Python's ``json`` module reads ``NaN`` /
    ``Infinity``, which RFC 8259 section 6 excludes from JSON numbers, so a body carrying them
    could smuggle a non-finite ``temperature`` past a JSON schema. Expected: a 400 in SGLang's
    error shape (``{"error": {"message", "type", "code": 400}}``), no request queued."""
    client, tm = app
    body = '{"text": "hi", "sampling_params": {"temperature": LIT, "max_new_tokens": 2}}'
    body = body.replace("LIT", literal)
    r = client.post("/generate", content=body, headers={**_headers(), "Content-Type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and isinstance(err["message"], str) and err["message"]
    assert not tm.rid_to_state


# --------------------------------------------------------------------------- degenerate filters
@pytest.mark.parametrize("top_p", [1e-8, 1e-30, 1e-300, 5e-324])
def test_mlx_lm_1912_tiny_top_p_samples_the_most_likely_token(top_p: float) -> None:
    """ml-explore/mlx-lm#1912 (a ``top_p`` so small that ``1 - top_p`` rounds to 1 masked every
    token, so sampling drew uniform noise instead of the top token) and
    huggingface/text-generation-inference#544 (errors for very small ``top_p``). Expected: the
    nucleus always keeps the most likely token, so a tiny ``top_p`` is greedy. Oracle:
    ``torch.argmax`` of the logits."""
    z = _logits(scale=0.4)  # a flat distribution: without the nucleus, the argmax is rare
    want = z.argmax(dim=-1)
    params = [_params(temperature=0.8, top_p=top_p) for _ in range(z.shape[0])]
    for seed in SEEDS:
        assert torch.equal(_draws(z, params, seed), want), seed


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("temperature", [2 * SAMPLING_EPS, 1e-5, 3e-4])
def test_tensorrt_llm_15715_tiny_temperature_samples_the_argmax(
    dtype: torch.dtype, temperature: float
) -> None:
    """NVIDIA/TensorRT-LLM#15715 (a tiny non-zero temperature such as 1e-12 overflows
    ``logits / T`` to inf, NaN in softmax), microsoft/aici#19 (float16 logits with a -100 ban
    crashed ``multinomial`` below temperature 3e-4) and ohdearquant/lattice#316 (the overflow
    collapsed the draw to token 0). Expected: the ``T -> 0+`` limit, the argmax, with finite
    logprobs (no NaN anywhere). Oracle: ``torch.argmax`` of the float32 logits."""
    z = _logits().to(dtype)
    z[:, 5] = -100.0  # a banned token, as in aici#19
    want = z.float().argmax(dim=-1)
    params = [_params(temperature=temperature) for _ in range(z.shape[0])]
    for seed in SEEDS[:8]:
        gens = [torch.Generator().manual_seed(seed) for _ in params]
        out, lp = sample(z, params, [[] for _ in params], generators=gens, return_logprobs=True)
        assert torch.equal(out, want), seed
        assert not lp.isnan().any()
        assert bool(torch.isfinite(lp.gather(1, out.unsqueeze(1))).all())


def test_sendnn_inference_542_top_k_past_the_vocabulary_in_a_mixed_batch() -> None:
    """torch-spyre/sendnn-inference#542 (a request with ``top_k: 9999999`` crashed the server in
    ``apply_top_k_only``, and so did a batch mixing greedy rows with ``top_k`` rows) and
    OpenNMT/CTranslate2#586 (a segfault for ``sampling_topk`` past the vocabulary). Expected: a
    ``top_k`` past the vocabulary keeps the whole vocabulary, next to greedy rows. Oracle: the
    same seeded draw of a row with ``top_k=-1`` (no truncation), and ``torch.argmax`` for the
    greedy row."""
    z = _logits(rows=1, scale=1.0).repeat(3, 1)
    params = [
        _params(temperature=0),
        _params(temperature=1.0, top_k=9_999_999),
        _params(temperature=1.0, top_k=VOCAB),
    ]
    unfiltered = [_params(temperature=1.0)]
    for seed in SEEDS:
        out = _draws(z, params, seed)
        ref = _draws(z[:1], unfiltered, seed)
        assert int(out[0]) == int(z[0].argmax())
        assert int(out[1]) == int(out[2]) == int(ref[0]), seed


def test_llama_cpp_13822_min_p_one_keeps_only_the_top_tokens() -> None:
    """ggml-org/llama.cpp#13822 (fixing #13405: ``min_p`` could leave no token at all) and the
    ``min_p`` review of ggml-org/llama.cpp#3841 ("a maximum value will only use the top
    token"). Expected: ``min_p = 1`` (its largest valid value) keeps exactly the tokens whose
    probability equals the maximum, at any temperature. Oracle: ``torch.argmax`` of the logits
    (row 0) and the set of tied maxima (row 1, two tokens tied)."""
    z = _logits(rows=2, scale=0.5)
    z[1, 10] = z[1, 20] = float(z[1].max()) + 1.0
    params = [_params(temperature=1.7, min_p=1.0) for _ in range(2)]
    seen = set()
    for seed in SEEDS:
        out = _draws(z, params, seed)
        assert int(out[0]) == int(z[0].argmax())
        assert int(out[1]) in (10, 20)
        seen.add(int(out[1]))
    assert seen == {10, 20}  # both tied tokens stay in play


def test_sonar_814_temperature_scales_half_precision_logits() -> None:
    """dphnAI/sonar#814: temperature had no effect because the float32 upcast of the logits made
    a copy and the in-place division went to that copy. Expected: for float16 / bfloat16 logits
    the output logprobs are ``log_softmax(z / T)`` (SGLang's definition), not ``log_softmax(z)``.
    Oracle: float64 ``log_softmax`` of the same logits."""
    for dtype in (torch.float16, torch.bfloat16):
        z = (_logits(scale=0.5)).to(dtype)
        for t in (0.5, 2.0):
            params = [_params(temperature=t) for _ in range(z.shape[0])]
            _, lp = sample(z, params, [[] for _ in params], return_logprobs=True)
            want = torch.log_softmax(z.double() / t, dim=-1)
            assert torch.allclose(lp.double(), want, atol=2e-5), (dtype, t)
            assert not torch.allclose(lp.double(), torch.log_softmax(z.double(), dim=-1), atol=1e-2)


# --------------------------------------------------------------------------- logprobs vs sampling
def test_llama_cpp_5564_asking_for_logprobs_does_not_change_what_is_sampled() -> None:
    """ggml-org/llama.cpp#5564: the server's ``n_probs`` (how many top logprobs to report) was
    also used as the samplers' ``min_keep``, so ``min_p = 1`` with ``n_probs = 10`` still drew
    among 10 tokens. Expected: computing logprobs changes nothing that is sampled: ``min_p = 1``
    with logprobs on is greedy, and seeded ``top_k`` / ``top_p`` / plain rows draw the same ids
    with logprobs on as off. Oracles: ``torch.argmax`` of the logits, and the same seeded call
    without logprobs."""
    z = _logits(rows=4, scale=0.5)
    params = [
        _params(temperature=1.0, min_p=1.0),
        _params(temperature=1.3),
        _params(temperature=0.9, top_k=10),
        _params(temperature=1.1, top_p=0.5),
    ]
    for seed in SEEDS:
        gens = [torch.Generator().manual_seed(seed) for _ in params]
        with_lp, lp = sample(z, params, [[] for _ in params], generators=gens, return_logprobs=True)
        without = _draws(z, params, seed)
        assert torch.equal(with_lp, without), seed
        assert int(with_lp[0]) == int(z[0].argmax())
        assert lp.shape == z.shape


# --------------------------------------------------------------------------- /abort_request
def test_sglang_25561_empty_rid_with_prefix_aborts_nothing(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#25561 ("a guard against empty rid being treated as a startswith-prefix
    match for every request") on the ``prefix`` flag of sgl-project/sglang#30912. Expected:
    ``/abort_request`` with ``{"rid": "", "prefix": true}`` (every id starts with ``""``) aborts
    nothing and answers 200; ``{"rid": "adapter::", "prefix": true}`` aborts the one request
    under that prefix and no other. Oracle: the ``AbortReq`` messages sent to the scheduler."""
    from sglang_v4.managers.io_struct import AbortReq, GenerateReqInput

    client, tm = app
    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])

    def aborts() -> list[str]:
        return [o.rid for o in sent if isinstance(o, AbortReq)]

    def post_abort(body: dict[str, Any]) -> int:
        return client.post("/abort_request", json=body, headers=_headers()).status_code

    async def main() -> None:
        rids = ["adapter::1", "other::1"]
        gens = [
            tm.generate_request(GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 1}, rid=r))
            for r in rids
        ]
        tasks = [asyncio.ensure_future(g.__anext__()) for g in gens]
        while not all(r in tm.rid_to_state for r in rids):
            await asyncio.sleep(0.005)
        assert await asyncio.to_thread(post_abort, {"rid": "", "prefix": True}) == 200
        assert await asyncio.to_thread(post_abort, {"rid": ""}) == 200
        assert aborts() == []
        assert all(r in tm.rid_to_state for r in rids)
        assert await asyncio.to_thread(post_abort, {"rid": "adapter::", "prefix": True}) == 200
        assert aborts() == ["adapter::1"]
        for r in rids:  # the scheduler never answers: finish both here
            tm._handle_batch_output(batch_str_out(r))
        for t in tasks:
            await t
        for g in gens:
            await g.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not tm.rid_to_state


# --------------------------------------------------------------------------- integral float n
def _pydantic_int(value: Any) -> int | None:
    """``value`` read as an ``int`` field by pydantic's lax mode (what SGLang's and vLLM's request
    models use), or ``None`` when pydantic refuses it."""
    import pydantic

    try:
        return pydantic.TypeAdapter(int).validate_python(value)
    except pydantic.ValidationError:
        return None


@pytest.mark.parametrize("n", [1.0, 2.0, 3.0])
def test_litellm_1854_integral_float_n_reads_as_that_integer(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, n: float
) -> None:
    """BerriAI/litellm#1854: a client's own arithmetic set an integer count to a float (``max
    tokens being set to float``), so integral floats such as ``2.0`` reach servers in integer
    fields. ``/generate`` read ``max_new_tokens: 5.0`` as 5 but refused ``n: 2.0`` with "n must
    be in [1, 128] (got 2.0)" -- a message its own value contradicts. Expected: ``n`` follows the
    rule of every other integer sampling field (pydantic's lax ``int``, as SGLang's and vLLM's
    request models read it): ``2.0`` is ``n = 2``, that many samples are queued. Oracles:
    ``pydantic.TypeAdapter(int)`` and the requests sent to the scheduler socket."""
    from sglang_v4.entrypoints.native_api import parse_generate_body
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput

    want = _pydantic_int(n)
    assert want == int(n)
    client, tm = app
    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])
    body = {"text": "hi", "sampling_params": {"n": n, "max_new_tokens": 1, "temperature": 0.7}}

    async def main() -> None:
        gen = tm.generate_request(parse_generate_body(body))
        task = asyncio.ensure_future(gen.__anext__())
        while sum(isinstance(o, TokenizedGenerateReqInput) for o in sent) < want:
            if task.done():  # refused before reaching the scheduler: its error fails the test
                task.result()
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # nothing more comes
        reqs = [o for o in sent if isinstance(o, TokenizedGenerateReqInput)]
        assert len(reqs) == want
        assert all(r.sampling_params.n == want and type(r.sampling_params.n) is int for r in reqs)
        for r in reqs:  # the scheduler never answers: finish them here
            tm._handle_batch_output(batch_str_out(r.rid))
        await task
        await gen.aclose()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert not tm.rid_to_state


@pytest.mark.parametrize("n", [2.5, 1.5, 0.5])
def test_litellm_1854_fractional_n_is_a_400_that_says_integer(app: tuple[Any, Any], n: float) -> None:
    """BerriAI/litellm#1854, the other side: a fractional count, which pydantic's lax ``int``
    refuses, stays a 400, and its message says ``n`` must be an integer (not that it is out of
    ``[1, 128]``, which ``2.5`` is not). Oracle: ``pydantic.TypeAdapter(int)``."""
    assert _pydantic_int(n) is None
    client, tm = app
    r = _refused(client, {"text": "hi", "sampling_params": {"n": n}})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "n must be an integer" in msg and r.json()["error"]["code"] == 400
    assert not tm.rid_to_state


# --------------------------------------------------------------------------- per-prompt lists
@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("return_logprob", [False], "a boolean"),
        ("return_logprob", [True, False], "a boolean"),
        ("extra_key", ["tenant-a"], "a string"),
        ("top_logprobs_num", [3], "an integer"),
        ("logprob_start_len", [0], "an integer"),
    ],
)
def test_py_zipkin_63_a_list_in_a_single_requests_scalar_field_is_a_400(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, field: str, value: list[Any], kind: str
) -> None:
    """Yelp/py_zipkin#63: a list sat in what should have been a boolean flag and the code only
    tested its truth. On ``/generate`` a single prompt with ``"return_logprob": [false]`` (a
    batch's per-prompt shape) turned logprobs *on* -- a non-empty list is truthy -- and an
    ``extra_key`` list reached the scheduler as the cache namespace. Expected: as for ``rid`` and
    ``priority``, a list in a per-prompt field of a single request is a 400 naming the field and
    its type, nothing is sent to the scheduler; the same list on a batch of that many prompts is
    accepted. Oracles: JSON's own types (a list is no boolean / string / integer) and the
    messages sent to the scheduler socket."""
    from sglang_v4.managers.io_struct import GenerateReqInput

    client, tm = app
    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])
    r = _refused(client, {"text": "hi", field: value})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and f"{field} must be {kind}" in err["message"]
    assert sent == [] and not tm.rid_to_state
    batch = GenerateReqInput(text=["a"] * len(value), **{field: value})
    batch.normalize_batch_and_arguments()  # the batch shape stays valid
    assert getattr(batch, field) == value
