"""Process, logging and tokenizer helpers shared by the runtime processes."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

#: Linux ``prctl`` option number of ``PR_SET_PDEATHSIG`` (``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1


def configure_logging(level: str = "info", prefix: str = "") -> None:
    """Configure the root logger in SGLang's format: ``[YYYY-mm-dd HH:MM:SS<prefix>] message``.

    Args:
        level: ``debug|info|warning|error|critical``.
        prefix: text inside the brackets after the time, e.g. ``" Scheduler"``.
    """
    fmt = f"[%(asctime)s{prefix}] %(message)s"
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for noisy in ("uvicorn.access", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the Linux kernel to send ``sig`` to this process when its parent dies.

    Uses ``prctl(PR_SET_PDEATHSIG, sig)`` through ctypes; a no-op on other platforms.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except OSError:  # pragma: no cover - libc always present on Linux
        logger.warning("prctl(PR_SET_PDEATHSIG) unavailable")


def start_parent_watchdog(parent_pid: int, interval_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that exits this process (code 1) once ``parent_pid`` is gone.

    Complements :func:`set_parent_death_signal` (which fires on the death of the parent *thread*
    and only on Linux): it polls ``os.getppid()`` every ``interval_s`` seconds.
    """

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid:
                logging.getLogger(__name__).error("Parent process %d died; exiting.", parent_pid)
                os._exit(1)

    t = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    t.start()
    return t


def get_tokenizer(path: str) -> Any:
    """Load the model's tokenizer (a ``transformers`` fast tokenizer) from a HF-layout directory.

    Tries ``AutoTokenizer.from_pretrained(path)``, then ``PreTrainedTokenizerFast`` on
    ``path/tokenizer.json``.

    Raises:
        ValueError: the directory has no usable tokenizer.
    """
    import transformers

    errors: list[str] = []
    try:
        return transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001 - fall back to the raw tokenizer.json
        errors.append(f"AutoTokenizer: {e}")
    tok_file = os.path.join(path, "tokenizer.json")
    if os.path.exists(tok_file):
        try:
            return transformers.PreTrainedTokenizerFast(tokenizer_file=tok_file)
        except Exception as e:  # noqa: BLE001
            errors.append(f"PreTrainedTokenizerFast: {e}")
    raise ValueError(f"tokenizer_path: cannot load a tokenizer from {path!r}: {'; '.join(errors)}")


def find_printable_text(text: str) -> str:
    """The longest prefix of ``text`` without trailing U+FFFD (an incomplete UTF-8 sequence).

    Incremental detokenization emits only this part until the following tokens complete the
    character (same idea as SGLang's / HF TextStreamer's printable-text rule).
    """
    end = len(text)
    while end > 0 and text[end - 1] == "\ufffd":
        end -= 1
    return text[:end]


def is_port_available(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound by a TCP server now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def kill_process(proc: Any, timeout_s: float = 5.0) -> None:
    """Terminate a ``multiprocessing.Process`` (SIGTERM, then SIGKILL after ``timeout_s``)."""
    if proc is None or not proc.is_alive():
        return
    proc.terminate()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout_s)
