"""Test-session settings shared by every test module.

torch runs with one intra-op thread: the suite starts server subprocesses next to the test
process on a 2-core machine, and oversubscribed OpenMP pools make small ops orders of magnitude
slower. ``test/`` is put on ``sys.path`` so tests can import their shared helpers
(``dsv4_testutil``, ``scheduler_testutil``, ``server_fixture``...).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def sched_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A random fp32 ``sliding_first`` checkpoint (seed 4) shared by the in-process scheduler
    tests; build schedulers on it with ``scheduler_testutil.make_scheduler``."""
    from scheduler_testutil import write_sched_model

    return write_sched_model(tmp_path_factory, seed=4)
