"""Shared pieces of the offline ``Engine`` test modules: the ``engine`` and ``expected`` fixtures,
the held request ``HELD``, and the check that every page and slot of a cancelled request is
released.

A module uses the fixtures by importing them (``from engine_testutil import engine_fixture,
expected_fixture``, marked ``# noqa: F401``: pytest, not the module, refers to them).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from server_fixture import fake_output_text, hf_auto_tokenizer

# A request the model-free ``FakeScheduler`` holds after its first token (``[hold]``): only an
# abort ends it.
HELD = {"prompt": "[hold] long", "sampling_params": {"max_new_tokens": 450}}


@pytest.fixture(scope="module", name="engine")
def engine_fixture(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on ``FakeScheduler`` (``[hold]`` prompts held)."""
    return shared_fake_engine


@pytest.fixture(scope="module", name="expected")
def expected_fixture() -> Any:
    """``n`` -> the text of the fake model's first ``n`` tokens, as ``transformers`` decodes them."""
    tok = hf_auto_tokenizer()
    return lambda n: fake_output_text(tok, n)


def _assert_released(engine: Any, expected: Any) -> None:
    """Within 30 s: no used pages, no running request, nothing left in the manager's table; then a
    fresh request gives the fake model's known text."""
    deadline = time.time() + 30
    while time.time() < deadline:
        info = engine.get_server_info()
        if info["kv_pool"]["used_pages"] == 0 and not engine.tokenizer_manager.rid_to_state:
            break
        time.sleep(0.05)
    assert info["kv_pool"]["used_pages"] == 0, info["kv_pool"]
    assert not engine.tokenizer_manager.rid_to_state
    assert engine.generate(prompt="ok", sampling_params={"max_new_tokens": 3})["text"] == expected(3)
