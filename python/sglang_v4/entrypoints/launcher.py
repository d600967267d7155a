"""The process launcher shared by the HTTP server and the offline ``Engine``.

``launch_subprocesses`` starts SGLang's process split without HTTP: the scheduler process
(``managers/scheduler_process.py``) and the detokenizer process
(``managers/detokenizer_manager.py``), joined to the main process's ``TokenizerManager`` by ZMQ
IPC sockets, plus, with ``tp_size > 1``, this node's other tensor-parallel ranks
(``entrypoints/tp_launch.py``). Also here: the checks run before launching
(:func:`check_model_dir`, :func:`resolve_model_path`, :func:`preflight_server`). The
``get_server_info`` / ``get_model_info`` builders are in :mod:`sglang_v4.entrypoints.server_info`
(re-exported here).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from sglang_v4.entrypoints.server_info import (  # noqa: F401 - re-exported
    build_model_info,
    build_server_info,
    read_model_config,
)
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.server_args import PortArgs, ServerArgs

logger = logging.getLogger(__name__)

#: Seconds to wait for the scheduler to load the model and report ready.
SCHEDULER_READY_TIMEOUT_S = float(os.environ.get("SGLANG_V4_READY_TIMEOUT", "900"))
#: Seconds the children have to exit after SIGTERM at a stop (together), before SIGKILL. They
#: exit at once when idle; the scheduler finishes the step it is in first.
CHILD_STOP_TIMEOUT_S = 2.0
#: Seconds between a server's or Engine's checks for a dead child process or a crashed backend (a
#: ``waitpid`` each): /health turns 503 and in-flight calls fail at most this long after a child died.
CHILD_CHECK_INTERVAL_S = 0.1
#: The scheduler process's function (``module:function``, imported in that process only).
RUN_SCHEDULER = "sglang_v4.managers.scheduler_process:run_scheduler_process"


#: How to make a model directory, quoted by the start-up errors below.
MAKE_CHECKPOINT_HINT = "python -m sglang_v4.tools.make_checkpoint DIR --preset tiny"
_LAYOUT = "a Hugging Face-layout model directory (config.json, *.safetensors, tokenizer.json)"


def check_model_dir(
    model_path: str,
    tokenizer_path: str | None = None,
    load_format: str = "auto",
    skip_tokenizer_init: bool = False,
    model_overrides: dict[str, Any] | None = None,
    page_size: int | None = None,
    context_length: int | None = None,
    quantization: str | None = None,
    tp_size: int = 1,
    ep_size: int = 1,
    device: str = "cuda",
    chat_template: str | None = None,
    checker: Any = None,
) -> Any:
    """Check that ``model_path`` is a local model directory before any process loads the model.

    Each failure is one line saying what is expected and how to make one (a hub id is not
    downloaded: the message says how to download it), instead of tracebacks from the child
    processes about a missing ``config.json`` or tokenizer.

    ``checker``: a prewarmed scheduler child (:class:`~sglang_v4.entrypoints.prewarm.PrewarmedChild`,
    still waiting for its job) that runs the checks reading the config with transformers
    (:mod:`~sglang_v4.entrypoints.model_config_checks`) while this process loads the tokenizer, so
    that this process does not import torch; the same errors, raised in the same order.

    Returns:
        The tokenizer it loaded to check it (:func:`sglang_v4.utils.get_tokenizer` of
        ``tokenizer_path or model_path``), for the caller to hand to the ``TokenizerManager``
        instead of loading it again; ``None`` with ``skip_tokenizer_init``.

    Raises:
        ValueError: naming ``model_path`` or ``tokenizer_path``: missing, a file, a hub id, no
            ``config.json`` / unreadable, not DeepSeek-V4 or invalid once ``model_overrides``
            (``--json-model-override-args``) are applied, no safetensors checkpoint (unless
            ``load_format="dummy"``), no tokenizer files or none that load (unless
            ``skip_tokenizer_init``: then no process loads a tokenizer), a Hugging Face cache root
            (naming its snapshot); naming ``page_size`` when given and the model's KV layout
            cannot use it (:func:`check_page_size`); naming ``context_length`` when it exceeds the
            model's (:func:`check_context_length`); naming ``tp_size`` / ``ep_size`` when the
            model's dimensions do not split over them (``device``: where it runs, which decides
            whether the experts stay FP4; :func:`~sglang_v4.distributed.parallel_state.
            check_parallel_layout`); naming the field when ``architectures`` names
            another model or the checkpoint's ``quantization_config`` (with ``quantization``,
            ``--quantization``), a ModelOpt ``hf_quant_config.json`` or a GPTQ / AWQ
            ``quantize_config.json`` / ``quant_config.json`` is not one sglang-v4 computes
            (:func:`~sglang_v4.layers.quantization.resolve_quantization`,
            :func:`~sglang_v4.model_loader.foreign_quant.check_quant_side_files`); naming the file and the
            tensor when the safetensors headers do not hold the model's tensors with their shapes
            (:func:`~sglang_v4.model_loader.weight_loader.check_checkpoint`; not with
            ``load_format="dummy"``, with a scheduler class set by ``$SGLANG_V4_SCHEDULER_CLASS``
            (it loads its own weights), nor for safetensors files holding no tensor at all);
            naming ``chat_template`` when ``--chat-template`` names nothing usable, or
            ``tokenizer_path`` when transformers cannot load the tokenizer to render it
            (:mod:`~sglang_v4.entrypoints.chat_template`; not with ``skip_tokenizer_init``).
    """
    if not os.path.exists(model_path):
        looks_like_hub_id = model_path.count("/") == 1 and not model_path.startswith((".", "/", "~"))
        if looks_like_hub_id:
            raise ValueError(
                f"model_path: {model_path!r} is not a local directory; sglang-v4 does not download "
                f"from the Hugging Face Hub. Download it first (hf download {model_path} "
                f"--local-dir DIR) and pass --model-path DIR, or make a random-weight model with: "
                f"{MAKE_CHECKPOINT_HINT}"
            )
        raise ValueError(
            f"model_path: {model_path!r} does not exist; expected {_LAYOUT}. Make one with: "
            f"{MAKE_CHECKPOINT_HINT}"
        )
    if not os.path.isdir(model_path):
        raise ValueError(
            f"model_path: {model_path!r} is a file; expected {_LAYOUT}. Make one with: {MAKE_CHECKPOINT_HINT}"
        )
    cfg = os.path.join(model_path, "config.json")
    snapshots = os.path.join(model_path, "snapshots")
    if not os.path.isfile(cfg) and os.path.isdir(snapshots):  # huggingface_hub's cache of one repo
        found = sorted(
            os.path.join(snapshots, n)
            for n in os.listdir(snapshots)
            if os.path.isfile(os.path.join(snapshots, n, "config.json"))
        )
        hint = f"pass --model-path {found[-1]}" if found else "its snapshots/ hold no config.json"
        raise ValueError(
            f"model_path: {model_path!r} is a Hugging Face cache directory, not a model directory; {hint}"
        )
    if not os.path.isfile(cfg):
        raise ValueError(
            f"model_path: {model_path!r} has no config.json; expected {_LAYOUT}. Make one with: "
            f"{MAKE_CHECKPOINT_HINT}"
        )
    try:
        with open(cfg, encoding="utf-8-sig") as f:
            raw = json.load(f)
        model_type = raw.get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"model_path: {cfg} is not a readable JSON object ({e})") from None
    if model_type not in (None, "deepseek_v4", "deepseek_v4_flash"):  # None: ModelConfig's default
        raise ValueError(
            f"model_path: {cfg} has model_type {model_type!r}; sglang-v4 serves DeepSeek-V4 models "
            f"(model_type 'deepseek_v4'). Make one with: {MAKE_CHECKPOINT_HINT}"
        )
    from sglang_v4.entrypoints import model_config_checks as checks

    config_args = (
        model_path,
        raw,
        model_overrides,
        load_format,
        quantization,
        page_size,
        context_length,
        tp_size,
        ep_size,
        device,
    )
    tok_args = (model_path, tokenizer_path, skip_tokenizer_init, chat_template)
    if checker is None:
        mc = checks.check_model_config(*config_args)
        check_has_weights(model_path, load_format)
        tokenizer = check_tokenizer(*tok_args)
        checks.check_model_weights(model_path, mc, load_format)
        return tokenizer
    # the same checks, the config's in the child while this process loads the tokenizer; the
    # first failure in the order above is raised (each answer, with its log records, is taken
    # only once the checks before it passed)
    config_answer = checker.call(checks.check_config_in_child, *config_args)
    weights_answer = checker.call(checks.check_weights_in_child, model_path, load_format)
    tokenizer, tok_error = None, None
    try:
        tokenizer = check_tokenizer(*tok_args)
    except Exception as e:  # noqa: BLE001 - raised below, after any config error
        tok_error = e
    config_answer()
    check_has_weights(model_path, load_format)
    if tok_error is not None:
        raise tok_error
    weights_answer()
    return tokenizer


def check_has_weights(model_path: str, load_format: str) -> None:
    """``model_path`` holds a ``*.safetensors`` file (unless ``load_format="dummy"``).

    Raises:
        ValueError: naming ``model_path`` (and the other weight files found, which are not read).
    """
    if load_format != "dummy" and not any(n.endswith(".safetensors") for n in os.listdir(model_path)):
        others = sorted(n for n in os.listdir(model_path) if n.endswith((".bin", ".pt", ".pth", ".gguf")))
        found = f" (found {', '.join(others[:3])}: sglang-v4 reads safetensors only)" if others else ""
        raise ValueError(
            f"model_path: {model_path!r} has no *.safetensors weights{found} (use --load-format dummy for "
            f"random weights); expected {_LAYOUT}. Make one with: {MAKE_CHECKPOINT_HINT}"
        )


def check_tokenizer(
    model_path: str, tokenizer_path: str | None, skip_tokenizer_init: bool, chat_template: str | None
) -> Any:
    """The tokenizer checks of :func:`check_model_dir` (arguments as there).

    Returns:
        The tokenizer loaded from ``tokenizer_path or model_path`` (``None`` with
        ``skip_tokenizer_init``: nothing is checked).

    Raises:
        ValueError: as :func:`check_model_dir` documents for ``tokenizer_path`` and ``chat_template``.
    """
    if skip_tokenizer_init:
        return None
    tok = tokenizer_path or model_path
    if tokenizer_path is not None and not os.path.isdir(tok):
        what = (
            "is a file; pass the directory that holds tokenizer.json / tokenizer_config.json"
            if os.path.isfile(tok)
            else "does not exist (sglang-v4 does not download tokenizers: pass a local directory)"
        )
        raise ValueError(f"tokenizer_path: {tok!r} {what}")
    if not os.path.isdir(tok) or not any(
        os.path.isfile(os.path.join(tok, n)) for n in ("tokenizer.json", "tokenizer_config.json")
    ):
        raise ValueError(
            f"tokenizer_path: {tok!r} has no tokenizer.json / tokenizer_config.json; copy the model's "
            "tokenizer files there or pass --tokenizer-path DIR"
        )
    from sglang_v4.utils import get_tokenizer

    # what the tokenizer manager and the detokenizer will load: tokenizer_config.json alone
    # names no vocabulary for a fast tokenizer
    try:
        tokenizer = get_tokenizer(tok)
    except ValueError as e:
        raise ValueError(
            f"{' '.join(str(e).split())} (pass --skip-tokenizer-init to serve token ids only)"
        ) from None
    if chat_template is not None:
        from sglang_v4.entrypoints.chat_template import load_template_renderer, resolve_chat_template

        resolve_chat_template(chat_template, tok)
        load_template_renderer(tok)
    return tokenizer


#: NVIDIA ModelOpt's quantization file, written next to ``config.json`` by its exports (SGLang
#: and vLLM read the quantization from it when ``config.json`` has none).
MODELOPT_QUANT_FILE = "hf_quant_config.json"


def check_modelopt_config(model_path: str) -> None:
    """Refuse a ModelOpt export (``hf_quant_config.json`` naming a ``quant_algo``): its weights
    (e.g. NVFP4: packed uint8 + float8 ``weight_scale`` + ``weight_scale_2`` + ``input_scale``)
    are not DeepSeek's block FP8 / FP4 formats.

    Raises:
        ValueError: naming the file and its ``quantization.quant_algo``.
    """
    path = os.path.join(model_path, MODELOPT_QUANT_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8-sig") as f:
            algo = (json.load(f).get("quantization") or {}).get("quant_algo")
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(f"model_path: {path} is not a readable JSON object ({e})") from None
    if algo:
        raise ValueError(
            f"model_path: {path}: quantization.quant_algo {algo!r} (NVIDIA ModelOpt) is not supported; "
            "sglang-v4 serves DeepSeek's block FP8 / FP4 checkpoints and unquantized ones"
        )


#: ``architectures`` values of DeepSeek-V4 checkpoints (``config.json``).
ARCHITECTURES = ("DeepseekV4ForCausalLM",)


def check_architectures(architectures: Any, cfg: str) -> None:
    """``config.json``'s ``architectures``: absent / empty (the model class follows from
    ``model_type``, as transformers' auto classes resolve it) or only :data:`ARCHITECTURES`.

    Raises:
        ValueError: naming ``cfg`` and ``architectures``: not a list of strings, or naming another
            model class (e.g. ``DeepseekV3ForCausalLM``, or V4's multi-token-prediction draft
            ``DeepseekV4ForCausalLMNextN``).
    """
    if architectures is None:
        return
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        raise ValueError(
            f"model_path: {cfg}: architectures must be a list of class names, got {architectures!r}"
        )
    other = [a for a in architectures if a not in ARCHITECTURES]
    if other:
        raise ValueError(
            f"model_path: {cfg}: architectures {architectures!r} names {other[0]!r}; sglang-v4 serves "
            f"{ARCHITECTURES[0]} (DeepSeek-V4) checkpoints"
        )


def check_page_size(page_size: int, mc: Any) -> None:
    """The KV pool's constraint, checked before any process loads the model: a block page holds whole
    compressed entries and whole window pages (``DSV4KVPool``).

    Args:
        page_size: ``--page-size``.
        mc: the model's :class:`~sglang_v4.configs.model_config.ModelConfig`.

    Raises:
        ValueError: naming ``page_size``: not a multiple of the CSA / HCA compression rate of a
            layer the model has, or of its ``sliding_window``.
    """
    need = [("sliding_window", mc.sliding_window)]
    if mc.csa_layers:
        need.append(("CSA compress rate", mc.csa_ratio))
    if mc.hca_layers:
        need.append(("HCA compress rate", mc.hca_ratio))
    for name, r in need:
        if page_size % r:
            lcm = math.lcm(*(v for _, v in need), 128)
            raise ValueError(
                f"page_size: {page_size} is not a multiple of the model's {name} ({r}); "
                f"pass --page-size {lcm} (or a multiple of it)"
            )


#: SGLang's environment switch that lets ``--context-length`` exceed the model's context.
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def check_context_length(context_length: int, mc: Any) -> None:
    """``--context-length`` against the model's (``ModelConfig.context_length``: ``config.json``'s
    ``max_position_embeddings``, or a key SGLang prefers to it), as SGLang checks
    it: a larger value is refused unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` is ``1`` /
    ``true`` / ``yes`` / ``y`` (any case), which logs a warning and serves the longer context
    (positions past the trained length: outputs there may be wrong). A smaller value needs nothing.

    Raises:
        ValueError: naming ``context_length``.
    """
    model_len = int(mc.context_length)
    if context_length <= model_len:
        return
    msg = (
        f"context_length ({context_length}) is greater than the model's context length ({model_len}, "
        f"{getattr(mc, 'context_length_key', 'max_position_embeddings')} in config.json); positions past "
        "it may give wrong outputs"
    )
    if os.environ.get(ALLOW_LONGER_CONTEXT_ENV, "").strip().lower() in ("1", "true", "yes", "y"):
        logger.warning("%s (allowed by %s)", msg, ALLOW_LONGER_CONTEXT_ENV)
        return
    raise ValueError(f"{msg}. To allow it, set the environment variable {ALLOW_LONGER_CONTEXT_ENV}=1")


def resolve_model_path(server_args: ServerArgs) -> Any:
    """Fill ``model_path`` (embedded default when None) and ``tokenizer_path`` in place. The
    config checks run in the prewarmed scheduler child when one waits
    (:func:`~sglang_v4.entrypoints.prewarm.started`; ``checker`` of :func:`check_model_dir`).

    Returns:
        The tokenizer :func:`check_model_dir` loaded from ``tokenizer_path`` (``None`` with
        ``skip_tokenizer_init``): pass it to the ``TokenizerManager`` so that the main process
        loads it once.

    Raises:
        ValueError: the directory is not a usable model directory (see :func:`check_model_dir`).
    """
    from sglang_v4.entrypoints import prewarm

    if server_args.model_path is None:
        from sglang_v4.tools.default_model import ensure_default_model

        server_args.model_path = str(ensure_default_model())
    tokenizer = check_model_dir(
        server_args.model_path,
        server_args.tokenizer_path,
        server_args.load_format,
        skip_tokenizer_init=server_args.skip_tokenizer_init,
        model_overrides=server_args.model_override_args(),
        page_size=server_args.page_size,
        context_length=server_args.context_length,
        quantization=server_args.quantization,
        tp_size=server_args.tp_size,
        ep_size=server_args.ep_size,
        device=server_args.device,
        chat_template=server_args.chat_template,
        checker=prewarm.started("scheduler"),
    )
    if server_args.tokenizer_path is None:
        server_args.tokenizer_path = server_args.model_path
    return tokenizer


def preflight_server(server_args: ServerArgs) -> Any:
    """The HTTP server's start-up checks: the address ``host:port`` can be listened on
    (:func:`sglang_v4.utils.bind_error`), then :func:`resolve_model_path` (fills ``model_path`` /
    ``tokenizer_path`` in place). Between the two, the backend processes are spawned (by
    :func:`~sglang_v4.entrypoints.prewarm.start_server_children`, unless torch and transformers
    are imported already): they import while the model directory is checked; discarded on failure.

    ``python -m sglang_v4.launch_server`` runs it before importing the HTTP stack (FastAPI), so a
    taken port is reported at once and a bad model directory within the checks' imports.

    Returns:
        :func:`resolve_model_path`'s tokenizer (``None`` with ``skip_tokenizer_init``).

    Raises:
        RuntimeError: the port is taken or the host cannot be listened on (the message starts
            with ``port:`` / ``host:``).
        ValueError: the model directory is not usable (see :func:`check_model_dir`).
    """
    from sglang_v4.utils import bind_error

    reason = bind_error(server_args.host, server_args.port)
    if reason is not None:
        raise RuntimeError(reason)
    from sglang_v4.entrypoints import prewarm

    # the backend processes import while the model directory is checked (prewarm.py)
    prewarm.start_server_children()
    try:
        return resolve_model_path(server_args)
    except BaseException:
        prewarm.discard_all()
        raise


@dataclasses.dataclass
class Subprocesses:
    """The child processes of one server / engine, and their ZMQ endpoints."""

    port_args: PortArgs
    scheduler_info: SchedulerReadyInfo
    scheduler: Any
    detokenizer: Any
    _shut: bool = False
    #: this node's tensor-parallel ranks other than 0 (``tp_launch.TPWorkerProc``)
    tp_workers: list[Any] = dataclasses.field(default_factory=list)

    def dead_process(self) -> str | None:
        """Name and exit code of a child that is no longer alive, else None."""
        for name, p in (("scheduler", self.scheduler), ("detokenizer", self.detokenizer)):
            if not p.is_alive():
                return f"{name} process (pid {p.pid}) exited with code {p.exitcode}"
        from sglang_v4.entrypoints.tp_launch import dead_worker

        return dead_worker(self.tp_workers)

    def dead_were_stopped(self) -> bool:
        """True when some child is gone and every one that is gone was asked to stop (exit code 0
        or killed by SIGTERM / SIGINT: :func:`~sglang_v4.entrypoints.lifecycle.stopped_on_request`),
        as when a stop signal reaches the whole process group; False after any crash."""
        from sglang_v4.entrypoints.lifecycle import stopped_on_request

        procs = (self.scheduler, self.detokenizer, *(w.process for w in self.tp_workers))
        dead = [p for p in procs if not p.is_alive()]
        return bool(dead) and all(stopped_on_request(p.exitcode) for p in dead)

    def shutdown(self) -> None:
        """Stop the children (SIGTERM; SIGKILL for those left after
        :data:`CHILD_STOP_TIMEOUT_S`) and remove the IPC directory (idempotent)."""
        if self._shut:
            return
        self._shut = True
        from sglang_v4.utils import stop_processes

        # the scheduler (TP rank 0) and the detokenizer together; the other TP ranks after the
        # scheduler: stopped between steps it tells them to exit (tp_messages.Shutdown), and a
        # rank still there after that is stopped by signal
        stop_processes(
            (self.scheduler, self.detokenizer),
            [w.process for w in self.tp_workers],
            timeout_s=CHILD_STOP_TIMEOUT_S,
        )
        if self.port_args.ipc_dir:
            shutil.rmtree(self.port_args.ipc_dir, ignore_errors=True)


def launch_subprocesses(
    server_args: ServerArgs,
    should_stop: Callable[[], int | None] | None = None,
    while_loading: Callable[[], None] | None = None,
) -> Subprocesses:
    """Start the scheduler and detokenizer processes and wait until the model is loaded.

    ``server_args.model_path`` must be resolved (see :func:`resolve_model_path`).

    With ``tp_size > 1`` the other TP ranks of this node start first (``dist_init_addr`` is set
    here when not given: a free local port) and must report ready too. The children start with
    SIGINT ignored (:func:`~sglang_v4.entrypoints.lifecycle.start_ignoring_sigint`).

    ``should_stop``: polled while waiting (every 0.2 s); when it returns a signal number (the
    launcher's :class:`~sglang_v4.entrypoints.lifecycle.StopSignal`), the children are stopped and
    ``StopRequested`` is raised. ``while_loading``: called once, as soon as the children have
    their arguments, i.e. while the scheduler loads the model (the HTTP server imports its routes'
    modules then); an exception from it is raised after the children are stopped.

    Raises:
        RuntimeError: the scheduler or a TP rank failed to start (its traceback is in the log) or
            did not report ready within ``SCHEDULER_READY_TIMEOUT_S``.
        StopRequested: ``should_stop`` returned a signal (see above).
        SystemExit: (code 1) called in one of the children this function starts, i.e. an Engine
            created at the top level of a script without a main guard, which ``spawn`` re-runs
            there; the parent then raises the RuntimeError that names the guard.
    """
    from sglang_v4.entrypoints.lifecycle import StopRequested
    from sglang_v4.entrypoints.prewarm import MAIN_GUARD_HINT, OWN_PIPE, refuse_inside_own_child, take
    from sglang_v4.entrypoints.tp_launch import (
        dead_worker,
        poll_ready,
        start_tp_workers,
        with_dist_init_addr,
    )
    from sglang_v4.managers.detokenizer_manager import run_detokenizer_process

    # One of our own spawned children re-running the user's script top level: one line, exit 1
    # (the parent sees the exit code and raises its RuntimeError with the same hint).
    refuse_inside_own_child()
    port_args = PortArgs.init_new()
    parent = os.getpid()
    server_args = with_dist_init_addr(server_args)
    # started by preflight_server / the Engine while they checked the model (prewarm.py), or now
    sched_child, detok_child = take("scheduler"), take("detokenizer")
    workers = start_tp_workers(server_args, parent) if server_args.tp_size > 1 else []
    # named, not imported: the scheduler's module imports torch, which this process does not need
    sched_child.run(RUN_SCHEDULER, server_args, port_args, OWN_PIPE, parent)
    detok_child.run(run_detokenizer_process, server_args, port_args, parent)
    sched, detok, reader = sched_child.process, detok_child.process, sched_child.conn
    procs = Subprocesses(port_args, SchedulerReadyInfo(status="starting"), sched, detok, tp_workers=workers)
    atexit.register(procs.shutdown)
    if while_loading is not None:
        try:
            while_loading()
        except BaseException:
            procs.shutdown()
            raise
    deadline = time.monotonic() + SCHEDULER_READY_TIMEOUT_S
    info: SchedulerReadyInfo | None = None
    rank_error: str | None = None

    def stop_if_asked() -> None:
        signum = should_stop() if should_stop is not None else None
        if signum is not None:
            procs.shutdown()
            raise StopRequested(signum)

    while time.monotonic() < deadline:
        stop_if_asked()
        rank_error = poll_ready(workers) or dead_worker(workers)
        if rank_error is not None:
            break
        if info is None and reader.poll(0.2):
            try:
                info = reader.recv()
            except (EOFError, OSError):  # the child died (a reset when it left our job unread)
                info = None
                break
            if info.status != "ready":
                break
        if info is not None and all(w.is_ready for w in workers):
            break
        if info is None and not sched.is_alive():
            break
    stop_if_asked()  # a stop signal to the process group may have stopped a child first
    if rank_error is not None:
        procs.shutdown()
        raise RuntimeError(f"The server failed to start: {rank_error}")
    if info is not None and info.status == "ready" and not all(w.is_ready for w in workers):
        procs.shutdown()
        raise RuntimeError("The server failed to start: TP ranks not ready in time")
    if info is None or info.status != "ready":
        if info is not None:  # the scheduler logged its traceback; say only its last line again
            lines = info.error.strip().splitlines()
            detail = (lines[-1] if lines else "unknown error") + " (the scheduler's traceback is above)"
        else:
            detail = f"scheduler exit code {sched.exitcode}"
        if info is None and sched.exitcode == 1:
            detail += ". " + MAIN_GUARD_HINT
        procs.shutdown()
        raise RuntimeError(f"The scheduler process failed to start: {detail}")
    procs.scheduler_info = info
    return procs
