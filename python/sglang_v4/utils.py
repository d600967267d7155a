"""Process, logging and tokenizer helpers shared by the runtime processes."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import concurrent.futures
import ctypes
import errno
import functools
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, NoReturn, TypeVar

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Linux ``prctl`` option numbers of ``PR_SET_PDEATHSIG`` and ``PR_SET_NAME`` (``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def human_readable_int(text: str) -> int:
    """A token count as SGLang's ``--context-length`` / ``--max-total-tokens`` /
    ``--max-prefill-tokens`` take it: a plain integer, or a number with an SI suffix (``k``,
    ``M``, ``G``, ``T``: powers of 1000; decimals allowed, ``25.6k`` = 25600) or an IEC suffix
    (``Ki``, ``Mi``, ``Gi``, ``Ti``: powers of 1024; integers only, ``128Ki`` = 131072); a
    fraction of a token is truncated.
    Suffixes are case-sensitive, as in SGLang.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse reports it naming the flag).
    """
    value = str(text).strip()
    m = _HUMAN_INT.fullmatch(value)
    if m is None:
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid integer {text!r}: use a plain integer or a suffix k / M / G / T (x1000) or "
                "Ki / Mi / Gi / Ti (x1024), e.g. 128k or 128Ki"
            ) from None
    number, suffix = m.groups()
    if suffix in _IEC:
        if "." in number:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}: no decimals with {suffix}")
        return int(number) * _IEC[suffix]
    return int(Fraction(number) * _SI[suffix])  # a fraction of a token is dropped, as in SGLang


class _CurrentStdoutHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stdout`` is when a record is emitted, not the
    stream of the moment it was configured: a stdout replaced and closed since (an embedding
    application's redirect, a test harness's capture) must not turn later log lines into
    "--- Logging error ---" tracebacks on stderr."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; always sys.stdout
        pass


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
    handler = _CurrentStdoutHandler()
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


def set_process_name(name: str) -> None:
    """Name this process in ``ps`` / ``top`` / ``/proc/PID/comm`` (SGLang names its processes
    ``sglang::scheduler`` and so on the same way), so an operator can tell them apart.

    Uses ``prctl(PR_SET_NAME)`` on the calling (main) thread; the kernel keeps the first 15 bytes
    (``sglang_v4::scheduler`` shows as ``sglang_v4::sche``). A no-op on other platforms.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except OSError:  # pragma: no cover - libc always present on Linux
        logger.warning("prctl(PR_SET_NAME) unavailable")


def exit_on_sigterm() -> None:
    """Set up a child process's signals: SIGTERM becomes ``SystemExit(0)`` so a stopped child runs
    its finalizers (e.g. unlinks the multiprocessing semaphores tqdm creates) instead of dying with
    them leaked; SIGINT is ignored, because a Ctrl+C in a terminal reaches the whole process group
    and the parent decides (the HTTP server drains in-flight requests first, then stops its
    children with SIGTERM)."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_without_teardown(code: int) -> NoReturn:
    """End a process after a normal stop: run the ``atexit`` handlers (multiprocessing's
    finalizers, pyzmq's context cleanup...) and flush logs and stdio, then ``os._exit(code)``,
    skipping the interpreter's module teardown and its joins of non-daemon threads. Triton's
    nanobind extension reports every object still interned at teardown as "leaked" (dozens of
    lines on stderr at each server stop), and with torch and transformers loaded the teardown
    alone takes most of a second."""
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


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


@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): the character that stands for each byte value.
    Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
    are shifted to U+0100 onwards in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars: dict[str, int] = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            chars[chr(0x100 + shift)] = b
            shift += 1
    return chars


def byte_level_token_bytes(tokenizer: Any, tid: int) -> bytes | None:
    """The raw bytes of token ``tid`` of a byte-level BPE vocabulary, or ``None`` when the token's
    piece is not spelled in the byte-level alphabet (an added token, another tokenizer kind)."""
    if tokenizer is None:
        return None
    try:
        piece = tokenizer.convert_ids_to_tokens(int(tid))
    except Exception:  # noqa: BLE001 - an id outside the vocabulary: no raw bytes
        return None
    if not isinstance(piece, str) or not piece:
        return None
    alphabet = _byte_level_alphabet()
    if any(c not in alphabet for c in piece):
        return None
    return bytes(alphabet[c] for c in piece)


def _byte_level_max_chars_per_token(tok: Any) -> int | None:
    """See :attr:`FastTokenizer.max_chars_per_token` (``tok``: a ``tokenizers.Tokenizer``)."""
    import json

    try:
        spec = json.loads(tok.to_str())
    except Exception:  # noqa: BLE001 - an unreadable spec means "unknown"
        return None
    norm = spec.get("normalizer")
    if norm is not None and not (norm.get("type") == "Sequence" and not norm.get("normalizers")):
        return None  # a normalizer may shrink or drop characters
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("pre_tokenizer")):
        return None
    longest = max((len(t) for t in tok.get_vocab(with_added_tokens=False)), default=0)
    for added in tok.get_added_tokens_decoder().values():
        longest = max(longest, len(added.content))
    return longest or None


class FastTokenizer:
    """A light HF-compatible tokenizer on ``tokenizers.Tokenizer`` (no ``transformers`` import).

    Loads ``tokenizer.json`` and reads ``tokenizer_config.json`` for the BOS/EOS/pad tokens and a
    chat template (``chat_template.jinja`` beside it wins, as in transformers). The special tokens
    ``encode`` adds are those of ``tokenizer.json``'s post-processor: transformers 5 drops
    ``tokenizer_config.json``'s ``add_bos_token`` / ``add_eos_token`` whenever a ``tokenizer.json``
    exists (``PreTrainedTokenizerBase._from_pretrained``). Implements the subset of the ``transformers`` tokenizer
    API the runtime uses: ``encode``, ``decode``, ``batch_decode``, ``convert_ids_to_tokens``,
    ``convert_tokens_to_ids``, ``len()``, ``vocab_size``, ``bos/eos/pad_token(_id)``,
    ``all_special_ids``, ``chat_template``. ``test_server_tokenizer.py`` checks it against
    ``transformers.AutoTokenizer`` on the same files.
    """

    def __init__(self, path: str) -> None:
        import json

        import tokenizers

        self.name_or_path = path
        self._tok = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        cfg: dict[str, Any] = {}
        cfg_file = os.path.join(path, "tokenizer_config.json")
        if os.path.exists(cfg_file):
            with open(cfg_file, encoding="utf-8") as f:
                cfg = json.load(f)

        def token_str(v: Any) -> str | None:
            if isinstance(v, dict):
                return v.get("content")
            return v if isinstance(v, str) else None

        self.bos_token = token_str(cfg.get("bos_token"))
        self.eos_token = token_str(cfg.get("eos_token"))
        self.pad_token = token_str(cfg.get("pad_token"))
        self.bos_token_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_token_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        self.pad_token_id = self._tok.token_to_id(self.pad_token) if self.pad_token else None
        self.clean_up_tokenization_spaces = bool(cfg.get("clean_up_tokenization_spaces", False))
        self.chat_template = cfg.get("chat_template")
        jinja = os.path.join(path, "chat_template.jinja")
        if os.path.isfile(jinja):
            with open(jinja, encoding="utf-8") as f:
                self.chat_template = f.read()
        try:  # transformers reads null (and no key) as "no limit"
            self.model_max_length = int(cfg.get("model_max_length") or (1 << 30))
        except (TypeError, ValueError):
            self.model_max_length = 1 << 30
        unk = token_str(cfg.get("unk_token"))
        named = (self.bos_token, self.eos_token, self.pad_token, unk)
        self.all_special_ids = sorted({i for t in named if t and (i := self._tok.token_to_id(t)) is not None})
        self._max_chars_per_token: int | None = 0  # 0: not computed yet

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @property
    def vocab_size(self) -> int:
        """Base vocabulary size without added tokens (HF's ``vocab_size``)."""
        return int(self._tok.get_vocab_size(with_added_tokens=False))

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens``, those ``tokenizer.json``'s post-processor
        adds (none for the DeepSeek-V4 tokenizer, whose prompts carry their BOS as text)."""
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_releasing_gil(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """:meth:`encode` with the GIL released while the Rust tokenizer runs (same ids).

        ``tokenizers.Tokenizer.encode`` holds the GIL for the whole call (seconds for a prompt of
        millions of characters); ``encode_batch`` releases it, so running this in a worker thread
        leaves the event loop free.
        """
        return list(self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids)

    @property
    def max_chars_per_token(self) -> int | None:
        """The most characters of input text one token can stand for, or ``None`` when unknown.

        Known for a byte-level BPE without a normalizer (the DeepSeek tokenizers): a vocabulary
        token of ``k`` byte-level symbols covers ``k`` UTF-8 bytes, hence at most ``k`` characters,
        and an added (special) token covers its literal content. So a text of ``c`` characters has
        at least ``ceil(c / max_chars_per_token)`` tokens.
        """
        if self._max_chars_per_token == 0:
            self._max_chars_per_token = _byte_level_max_chars_per_token(self._tok)
        return self._max_chars_per_token

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        """Text of ``ids`` (an int or a list of ints)."""
        if isinstance(ids, int):
            ids = [ids]
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, batch: list[list[int]], skip_special_tokens: bool = False, **_: Any) -> list[str]:
        """Texts of several id lists."""
        return list(self._tok.decode_batch([list(b) for b in batch], skip_special_tokens=skip_special_tokens))

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        """Vocabulary token of an id, or the tokens of a list of ids (``None`` for an unknown id)."""
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        """Id of a vocabulary token, or the ids of a list of tokens (``None`` for an unknown token)."""
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        """The vocabulary, added tokens included: ``{token: id}``."""
        return dict(self._tok.get_vocab(with_added_tokens=True))


def get_tokenizer(path: str) -> Any:
    """Load the model's tokenizer from a HF-layout directory.

    ``tokenizer.json`` present: a :class:`FastTokenizer` (fast to import; same ids and text as
    ``transformers``). Otherwise ``transformers.AutoTokenizer.from_pretrained(path)``.

    Raises:
        ValueError: the directory has no usable tokenizer (message names ``tokenizer_path``).
    """
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        try:
            return FastTokenizer(path)
        except Exception as e:  # noqa: BLE001 - fall back to transformers
            logger.warning("FastTokenizer failed on %s (%s); using transformers", path, e)
    try:
        import transformers

        return transformers.AutoTokenizer.from_pretrained(path)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"tokenizer_path: cannot load a tokenizer from {path!r}: {e}") from None


def find_printable_text(text: str) -> str:
    """The longest prefix of ``text`` without trailing U+FFFD (an incomplete UTF-8 sequence).

    Incremental detokenization emits only this part until the following tokens complete the
    character (same idea as SGLang's / HF TextStreamer's printable-text rule).
    """
    end = len(text)
    while end > 0 and text[end - 1] == "\ufffd":
        end -= 1
    return text[:end]


#: Allocations between young-generation garbage collections in a serving process (Python's default
#: is 700: a decode step of a few hundred requests allocates that many lists several times over).
GC_GEN0_THRESHOLD = 20000


def freeze_gc_after_startup() -> None:
    """Make the cyclic garbage collector cheap for a serving loop: collect once, move everything
    that exists after start-up (model, tokenizer, pools: long-lived) out of the collector's sight
    (``gc.freeze``), and collect the young generation less often. Without it a decode step at a
    few hundred running requests pays collector pauses that walk the whole heap (measured: 170 ms
    inside one message build)."""
    import gc

    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)


def bind_error(host: str, port: int) -> str | None:
    """Why a TCP server cannot listen on ``host:port`` now; None when it can.

    ``host`` may be a name, an IPv4 or an IPv6 address (the socket family follows it, as
    uvicorn's does). The message starts with the field at fault: ``port:`` when the address is
    taken (and says what to do: stop that process or pick another ``--port``), ``host:`` when the
    host does not resolve or is not an address of this machine.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else str(e)
        return f"host: cannot resolve {host!r} ({reason})"
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return (
                    f"port: {host}:{port} is already in use (another server?); stop the process "
                    "listening there or pick a free port with --port"
                )
            return f"host: cannot listen on {host}:{port} ({e.strerror or e})"
    return None


def is_port_available(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound by a TCP server now (see :func:`bind_error`)."""
    return bind_error(host, port) is None


_blocking_pool: concurrent.futures.ThreadPoolExecutor | None = None


async def run_blocking(fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in a worker thread, awaited (``asyncio.to_thread`` on a pool of
    this module's own, created on first use).

    ``asyncio.run`` ends by joining its loop's default executor, so a call still running there
    (a prompt of megabytes being tokenized for a request the server's drain already failed) held
    the server's exit until it finished; this pool is not joined by the event loop, and a
    launcher that ends with :func:`exit_without_teardown` does not wait for it either.
    """
    global _blocking_pool
    if _blocking_pool is None:
        _blocking_pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="sglang_v4-blocking")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_blocking_pool, functools.partial(fn, *args, **kwargs))


def stop_processes(*waves: Sequence[Any], timeout_s: float = 2.0) -> None:
    """Stop ``multiprocessing.Process`` es wave by wave within ``timeout_s`` seconds in all.

    The processes of a wave get SIGTERM together (each handles it in parallel, instead of one
    after the other) once every process of the waves before it has exited; at the deadline every
    process still alive gets SIGKILL. Joins use the processes' sentinels (no polling). ``None``
    entries and processes already gone are skipped.
    """
    deadline = time.monotonic() + timeout_s
    started: list[Any] = []
    for wave in waves:
        procs = [p for p in wave if p is not None and p.is_alive()]
        for p in procs:
            p.terminate()
        started.extend(procs)
        for p in started:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            logger.warning("%s (pid %s) did not stop within %gs; killing it.", p.name, p.pid, timeout_s)
            p.kill()
            p.join(5.0)


def kill_process(proc: Any, timeout_s: float = 5.0) -> None:
    """Terminate a ``multiprocessing.Process`` (SIGTERM, then SIGKILL after ``timeout_s``)."""
    if proc is None or not proc.is_alive():
        return
    proc.terminate()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout_s)
