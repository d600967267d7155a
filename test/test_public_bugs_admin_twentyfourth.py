"""A twenty-fourth set of public bug reports, replayed against the server's administration surface:
the bound ``--log-requests-level 2`` puts on a request log line (strings and lists nested in the
sampling parameters too), what levels 1 and 3 log of the sampling parameters, the count of
aborted requests in ``/metrics``, and ``/model_info`` against a ``load_format`` that is no
string. Each test names its report.

Fault found here and fixed: at ``--log-requests-level 2`` only the prompt / output text and token
ids were cut to 2048 characters / ids; the sampling parameters were logged whole, so a request with
a long ``json_schema``, a long ``stop`` list or long ``stop`` strings wrote a log line of any size
(megabytes per request), where SGLang's level 2 cuts every string and list of the logged request,
at any depth, to its ``max_length`` of 2048.

Fixtures: the line builders of ``sglang_v4.managers.request_log`` called in-process, and the app of
``http_server.create_app`` in-process (``admin_app_testutil``), whose scheduler never answers.
Oracles: SGLang 0.5.23's own request logger (``_transform_data_for_logging`` and
``RequestLogger``'s per-level ``max_length``, its installed code run on the same sampling
parameters), Python's ``json`` parser, and ``prometheus_client``'s text parser with the label
names of SGLang 0.5.23's metrics collector (its installed source, read).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import admin_app_client

sglang_request_logger = pytest.importorskip("sglang.srt.utils.request_logger")

pytestmark = pytest.mark.timeout(120)

#: The note our cut appends (``"...(N more)"``) is at most this many characters.
NOTE_MAX = 32


def _sglang_max_length(level: int) -> int:
    """SGLang 0.5.23's ``max_length`` for ``--log-requests-level level`` (its own
    ``RequestLogger._compute_metadata`` run)."""
    rl = sglang_request_logger.RequestLogger(
        log_requests=True, log_requests_level=level, log_requests_format="json", log_requests_target=None
    )
    return rl.metadata[0]


def _sglang_logged(value: Any, level: int) -> Any:
    """``value`` as SGLang 0.5.23's JSON request log holds it at ``level``."""
    return sglang_request_logger._transform_data_for_logging(value, _sglang_max_length(level))


def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _longest(value: Any) -> tuple[int, int]:
    """(longest string, longest list) anywhere in ``value``."""
    strs = [len(v) for v in _walk(value) if isinstance(v, str)] or [0]
    lists = [len(v) for v in _walk(value) if isinstance(v, list)] or [0]
    return max(strs), max(lists)


def _big_sampling_params() -> dict[str, Any]:
    """Sampling parameters far over SGLang's level-2 bound: a 200 000-character JSON schema, a stop
    list of 3000 strings and ten stop strings of 100 000 characters."""
    schema = {"type": "object", "description": "x" * 200_000, "properties": {}}
    return {
        "max_new_tokens": 8,
        "temperature": 0.5,
        "json_schema": json.dumps(schema),
        "stop": [f"stop-{i}" for i in range(3000)] + ["y" * 100_000 for _ in range(10)],
        "custom_params": {"nested": ["z" * 50_000]},
    }


def _received(level: int, fmt: str, sp: dict[str, Any]) -> str:
    from sglang_v4.managers.request_log import received_line

    return received_line("rid-1", [1, 2, 3], "hello", sp, level, fmt)


# --------------------------------------------------------------------------- --log-requests


def test_sglang_33164_level_2_json_line_bounds_nested_sampling_params() -> None:
    """sgl-project/sglang#33164 (fixed by #33167): ``--log-requests`` at level 2 promises to cut
    what it logs to ``max_length`` (2048), but nested payloads escaped the bound and one request
    wrote a multi-megabyte log record. Expected: the JSON line's ``sampling_params`` hold no string
    and no list longer than SGLang 0.5.23's own level-2 transform of the same parameters holds
    (plus our ``"...(N more)"`` note), and the whole line is no bigger than twice SGLang's record."""
    sp = _big_sampling_params()
    line = _received(2, "json", sp)
    got = json.loads(line)["sampling_params"]
    ref = _sglang_logged(sp, 2)
    ref_str, ref_list = _longest(ref)
    our_str, our_list = _longest(got)
    assert ref_str <= _sglang_max_length(2) + 3  # the oracle itself is bounded
    assert our_str <= ref_str + NOTE_MAX, our_str
    assert our_list <= ref_list + 1, our_list
    assert len(line) <= 2 * len(json.dumps(ref)) + 1000, len(line)
    # what is short is logged as sent
    assert got["max_new_tokens"] == 8 and got["temperature"] == 0.5
    assert got["stop"][:3] == ["stop-0", "stop-1", "stop-2"]


def test_sglang_33164_level_2_text_line_cuts_each_list_element() -> None:
    """sgl-project/sglang#33164, its text-format half: list elements were printed whole, so ten
    1 MB strings in a list logged about 10 MB (the fix measured about 20 KB). Expected: the text
    line of the same request is bounded like SGLang 0.5.23's level-2 JSON record of it (no bigger
    than twice that record), and no run of one character in it is longer than the bound."""
    sp = {"max_new_tokens": 4, "stop": ["y" * 1_000_000 for _ in range(10)]}
    line = _received(2, "text", sp)
    ref = json.dumps(_sglang_logged(sp, 2))
    assert len(ref) < 50_000  # SGLang's bound holds for this payload
    assert len(line) <= 2 * len(ref) + 1000, len(line)
    assert "y" * (_sglang_max_length(2) + 1) not in line


@pytest.mark.parametrize("level", [1, 3])
def test_sglang_33164_levels_1_and_3_log_sampling_params_whole(level: int) -> None:
    """sgl-project/sglang#33164: the bound is level 2's only. SGLang 0.5.23's levels 1 and 3 use a
    ``max_length`` of 2**30 (nothing cut). Expected: the JSON line's ``sampling_params`` at level
    1 and 3 equal SGLang's transform of them, which is the parameters as sent."""
    assert _sglang_max_length(level) >= 1 << 30
    sp = {"max_new_tokens": 8, "json_schema": "s" * 5000, "stop": [str(i) for i in range(3000)]}
    got = json.loads(_received(level, "json", sp))["sampling_params"]
    assert got == _sglang_logged(sp, level) == sp


def test_sglang_33164_level_2_token_ids_and_text_still_cut() -> None:
    """sgl-project/sglang#33164: the prompt text and token ids of a level-2 line stay bounded with
    the nested cut in place. Expected: a 10 000-id prompt and a 10 000-character text log no more
    ids / characters than SGLang 0.5.23's level-2 transform keeps of them (plus one note), the
    kept ids are the prompt's own, in order."""
    from sglang_v4.managers.request_log import received_line

    ids = list(range(10_000))
    text = "t" * 10_000
    got = json.loads(received_line("r", ids, text, {}, 2, "json"))
    ref_ids = _sglang_logged(ids, 2)
    ref_text = _sglang_logged(text, 2)
    assert len(got["input_ids"]) <= len(ref_ids) + 1
    kept = [v for v in got["input_ids"] if isinstance(v, int)]
    assert kept == ids[: len(kept)] and len(kept) >= _sglang_max_length(2) // 2
    assert len(got["text"]) <= len(ref_text) + NOTE_MAX


# --------------------------------------------------------------------------- /metrics, /model_info


def _sglang_counter_labelnames(metric: str) -> str:
    """The ``labelnames=`` expression SGLang 0.5.23's metrics collector gives the counter
    ``metric`` (its installed source, read: importing it needs packages this image lacks)."""
    import importlib.util

    spec = importlib.util.find_spec("sglang.srt.observability.metrics_collector")
    assert spec is not None and spec.origin is not None
    src = Path(spec.origin).read_text(encoding="utf-8")
    head = src.index(f'name="{metric}"')
    line = next(ln for ln in src[head:].splitlines() if "labelnames=" in ln)
    return line.split("labelnames=", 1)[1].strip().rstrip(",")


def test_vllm_31503_aborted_requests_are_counted() -> None:
    """vllm-project/vllm#31503: the aborted-request count (``request_success_total`` with
    ``finished_reason="abort"``) stayed 0 although requests were aborted. SGLang counts them in
    ``sglang:num_aborted_requests_total``, labelled by the collector's labels only. Expected: after
    one aborted and one completed request, the exposition (read by ``prometheus_client``'s own
    parser) holds ``sglang:num_aborted_requests_total{model_name=...} 1``, a counter whose label
    names are SGLang's for it (``labels.keys()``: ``model_name``), and both requests are in
    ``sglang:num_requests_total``."""
    from prometheus_client.parser import text_string_to_metric_families
    from sglang_v4.entrypoints.metrics import TokenizerMetrics

    assert _sglang_counter_labelnames("sglang:num_aborted_requests_total") == "labels.keys()"
    m = TokenizerMetrics("fake-v4")
    m.observe_finished(10, 3, 0.5, aborted=True, decode_s=0.2)
    m.observe_finished(10, 3, 0.5, decode_s=0.2)
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    aborted = [s for s in fams["sglang:num_aborted_requests"].samples if s.name.endswith("_total")]
    assert fams["sglang:num_aborted_requests"].type == "counter"
    assert [(s.labels, s.value) for s in aborted] == [({"model_name": "fake-v4"}, 1.0)]
    total = sum(s.value for s in fams["sglang:num_requests"].samples if s.name.endswith("_total"))
    assert total == 2.0


def test_sglang_39237_model_info_is_json_and_a_class_loader_is_refused(tmp_path: Path) -> None:
    """sgl-project/sglang#39237 (and #29894): ``/model_info`` (and ``/server_info``) answered 500
    when ``load_format`` held a class (a custom loader) that the JSON encoder cannot write.
    Expected: a class as ``load_format`` is refused when the arguments are built (``ValueError``
    naming ``load_format``), and ``/model_info`` answers 200 with a body Python's ``json`` parses,
    whose ``load_format`` is a string."""
    from admin_app_testutil import ADMIN_KEY
    from sglang_v4.server_args import ServerArgs

    class CustomLoader:
        pass

    with pytest.raises(ValueError, match="load_format"):
        ServerArgs(model_path="m", device="cpu", load_format=CustomLoader)  # type: ignore[arg-type]
    with admin_app_client(tmp_path) as (client, _tm):
        r = client.get("/model_info", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 200, r.text
        body = json.loads(r.text)
        assert isinstance(body["load_format"], str)
