"""Test-session settings shared by every test module.

torch runs with one intra-op thread: the suite starts server subprocesses next to the test
process on a 2-core machine, and oversubscribed OpenMP pools make small ops orders of magnitude
slower. ``test/`` is put on ``sys.path`` so tests can import their shared helpers.
"""

from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
