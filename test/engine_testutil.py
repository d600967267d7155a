"""Shared check of the engine cancel tests: every page and slot of a cancelled request is released."""

from __future__ import annotations

import time
from typing import Any


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
