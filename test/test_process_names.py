"""Process names an operator sees: ``ps aux`` / ``pgrep -f`` show the whole name
(``sglang_v4::scheduler``), the kernel's 15-byte name (``top``, ``ps -e``, ``/proc/PID/comm``) its
first 15 bytes, as SGLang's ``sglang::scheduler`` processes read. The oracle is ``ps`` and ``pgrep``
themselves."""

from __future__ import annotations

import multiprocessing as mp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process names")


def _named_child(name: str, ready, release) -> None:  # noqa: ANN001 - multiprocessing events
    from sglang_v4.utils import set_process_name

    set_process_name(name)
    ready.set()
    release.wait(60)


@pytest.mark.skipif(shutil.which("ps") is None or shutil.which("pgrep") is None, reason="procps")
def test_named_process_reads_in_ps_aux_pgrep_and_comm() -> None:
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    name = "sglang_v4::scheduler"
    p = ctx.Process(target=_named_child, args=(name, ready, release), daemon=True)
    p.start()
    try:
        assert ready.wait(60)
        args = subprocess.run(["ps", "-o", "args=", "-p", str(p.pid)], capture_output=True, text=True)
        assert args.stdout.strip() == name  # ps aux's COMMAND column
        found = subprocess.run(["pgrep", "-f", "^sglang_v4::scheduler$"], capture_output=True, text=True)
        assert str(p.pid) in found.stdout.split()
        comm = subprocess.run(["ps", "-o", "comm=", "-p", str(p.pid)], capture_output=True, text=True)
        assert comm.stdout.strip() == name[:15] == Path(f"/proc/{p.pid}/comm").read_text().strip()
    finally:
        release.set()
        p.join(30)
        if p.is_alive():
            p.kill()
