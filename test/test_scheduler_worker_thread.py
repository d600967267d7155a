"""The overlap worker thread binds its CUDA device by index and never hangs the scheduler.

Regression (H200): a runner on ``torch.device("cuda")`` (no index) made the thread call
``torch.cuda.set_device(torch.device("cuda"))``, which raises; the thread died before its first
job and the scheduler waited forever on the first batch's future. The thread now binds
``device.index`` or the creating thread's current device, and a bind failure reaches every job's
future as an exception.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from sglang_v4.managers import tp_worker_overlap_thread as wt


class _Worker:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def forward_batch_generation(self, wb: object) -> str:
        return f"ran {wb}"


@pytest.mark.parametrize(
    "device,current,expected",
    [(torch.device("cuda"), 3, 3), (torch.device("cuda", 1), 3, 1), (torch.device("cpu"), 3, None)],
    ids=["bare-cuda", "cuda:1", "cpu"],
)
def test_thread_binds_an_index(monkeypatch, device: torch.device, current: int, expected: int | None) -> None:
    bound: list[object] = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: bound.append(d))
    client = wt.TpModelWorkerClient(_Worker(device))  # type: ignore[arg-type]
    try:
        assert client.submit(SimpleNamespace(n=1)).result(timeout=10) == "ran namespace(n=1)"
    finally:
        client.shutdown()
    assert bound == ([] if expected is None else [expected])
    assert all(isinstance(d, int) for d in bound)  # an index, never a bare device


def test_bind_failure_reaches_the_future(monkeypatch) -> None:
    def refuse(d: object) -> None:
        raise ValueError("no such device")

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", refuse)
    client = wt.TpModelWorkerClient(_Worker(torch.device("cuda")))  # type: ignore[arg-type]
    try:
        with pytest.raises(RuntimeError, match="could not bind its device: no such device"):
            client.submit(SimpleNamespace()).result(timeout=10)
    finally:
        client.shutdown()


@pytest.mark.parametrize(
    "slots",
    [[4, 5, 6, 7], [13, 14, 0, 1], [0, 5, 2], [2, 9, 4, 5], [7], []],
    ids=["consecutive", "wrapped", "spread-same-span", "spread", "one", "none"],
)
def test_future_map_write_matches_indexed_copy(slots: list[int]) -> None:
    """``FutureMap.write`` stores each id at its slot; oracle: ``index_copy_`` on a fresh map
    (the slice copy of consecutive slots must not catch lists whose ends merely look consecutive)."""
    from sglang_v4.managers.tp_worker import FutureMap

    fm, ref = FutureMap(4, torch.device("cpu")), torch.full((15,), -7, dtype=torch.int64)
    fm.token_ids.fill_(-7)
    ids = torch.arange(100, 100 + len(slots), dtype=torch.int64)
    fm.write(slots, ids)
    if slots:
        ref.index_copy_(0, torch.tensor(slots, dtype=torch.int64), ids)
    assert fm.token_ids.tolist() == ref.tolist()
