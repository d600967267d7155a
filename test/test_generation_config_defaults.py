"""``generation_config.json`` shapes of published checkpoints and the chat defaults they give.

* ``"do_sample"`` is not read, as SGLang (``ModelConfig.get_default_sampling_params``) and vLLM
  (``get_diff_sampling_param``) read only the sampling keys themselves: with ``"do_sample": false``
  the file's ``temperature`` / ``top_p`` / ``top_k`` / ``repetition_penalty`` are still the chat
  defaults, and the start-up log says ``do_sample`` was not read.
* ``max_new_tokens`` / ``max_length`` are not defaults (SGLang reads neither; vLLM's
  ``--generation-config`` makes ``max_new_tokens`` a server-wide cap instead): the request's
  length is unchanged, and the start-up log says they were not applied.
* An empty file, invalid JSON, a JSON ``null`` / list, unknown keys: the server starts (the model
  config reads, chat requests get SGLang's defaults) with a warning naming the file, never a crash.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client
from sglang_v4.configs.model_config import ModelConfig

CONFIG = Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"
MSGS = [{"role": "user", "content": "hi"}]


def _model_dir(tmp_path: Path, gen_text: str) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(CONFIG, d / "config.json")
    (d / "generation_config.json").write_text(gen_text)
    return d


def _sent(tok: Any, d: Path, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sampling params the chat route sent for ``body``, and the response."""
    tm = FakeTM(tok)
    r = app_client(tm, model_path=str(d)).post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": MSGS, **body}
    )
    assert r.status_code == 200, r.text
    return dict(tm.received[-1].sampling_params or {}), r.json()


def test_do_sample_is_not_read(tok: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    gen = {"do_sample": False, "temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.1}
    d = _model_dir(tmp_path, json.dumps(gen))
    with caplog.at_level(logging.INFO):
        sp, _ = _sent(tok, d, {})
    assert (sp["temperature"], sp["top_p"], sp["top_k"], sp["repetition_penalty"]) == (0.6, 0.9, 20, 1.1)
    assert any("do_sample false, which is not read" in m for m in caplog.messages), caplog.messages
    sp, _ = _sent(tok, d, {"temperature": 0.7, "top_p": 0.5})  # the request's own values win
    assert (sp["temperature"], sp["top_p"]) == (0.7, 0.5)


def test_length_keys_are_not_defaults(tok: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = _model_dir(tmp_path, json.dumps({"max_new_tokens": 2, "max_length": 3, "temperature": 0.6}))
    with caplog.at_level(logging.INFO):
        sp, r = _sent(tok, d, {})
    assert sp.get("max_new_tokens") is None and r["usage"]["completion_tokens"] > 3  # the whole reply
    assert sp["temperature"] == 0.6
    assert any("Not applied" in m and "max_new_tokens=2" in m for m in caplog.messages), caplog.messages


@pytest.mark.parametrize(
    "text",
    # a byte-order mark before a JSON object is skipped (RFC 8259 section 8.1); a mark alone is empty
    ["", "{", "null", "[1, 2]", '{"eos_token_id": "1", "temperature": "hot"}', "\ufeff"],
    ids=["empty", "truncated", "null", "list", "bad-values", "bom-only"],
)
def test_broken_generation_config_is_ignored_with_a_warning(
    tok: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    d = _model_dir(tmp_path, text)
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(CONFIG, plain / "config.json")
    with caplog.at_level(logging.WARNING):
        mc = ModelConfig.from_pretrained(str(d))
        sp, _ = _sent(tok, d, {})
    assert mc.eos_token_ids == ModelConfig.from_pretrained(str(plain)).eos_token_ids
    assert sp == _sent(tok, plain, {})[0]  # SGLang's defaults, as without the file
    assert any("generation_config.json" in m for m in caplog.messages), caplog.messages


def test_unknown_keys_change_nothing(tok: Any, tmp_path: Path) -> None:
    known = {"temperature": 0.6, "top_p": 0.95}
    d = _model_dir(tmp_path, json.dumps({**known, "transformers_version": "4.57.1", "foo": {"bar": [1]}}))
    sp, _ = _sent(tok, d, {})
    assert (sp["temperature"], sp["top_p"]) == (0.6, 0.95)
