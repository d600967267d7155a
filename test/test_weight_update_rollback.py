"""``swap_weights`` when a reload fails: the TP ranks agree, roll back to the checkpoint served
before, and say what they serve; when the rollback fails too (its checkpoint deleted) the server
process must not die of the error (a ``ValueError`` the scheduler answers as a 400), and the
message must say the weights may be partly replaced."""

from __future__ import annotations

import pytest
from sglang_v4.model_loader import weight_update


class _OneRank:
    """A tensor-parallel group of one rank (``min_int`` is the rank's own flag)."""

    def min_int(self, v: int) -> int:
        return v


def test_failed_update_rolls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[str] = []

    def reload(model, path: str) -> None:
        loads.append(path)
        if path == "/new":
            raise OSError("truncated shard")

    monkeypatch.setattr(weight_update, "reload_weights", reload)
    with pytest.raises(ValueError, match="Rolled back to the weights of '/old'"):
        weight_update.swap_weights(object(), _OneRank(), "/new", "/old")
    assert loads == ["/new", "/old"]


def test_failed_rollback_is_a_value_error_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def reload(model, path: str) -> None:
        raise OSError(f"{path}: no such file")

    monkeypatch.setattr(weight_update, "reload_weights", reload)
    with pytest.raises(ValueError, match="Rolling back to '/old' failed too.*partly replaced"):
        weight_update.swap_weights(object(), _OneRank(), "/new", "/old")
