"""SGLang server flags that sglang-v4 accepts without implementing them.

Users copy their SGLang launch command (``python -m sglang.launch_server ...``); it should start
here unchanged. Every SGLang flag falls in one of four classes:

* a :class:`~sglang_v4.server_args.ServerArgs` field of the same name (``--model-path``,
  ``--tp-size``, ``--mem-fraction-static``, ``--grammar-backend``, ``--cuda-graph-bs``, ...):
  honoured, documented where the field is defined;
* ``IGNORED``: a backend, kernel or tuning selection with no counterpart here (sglang-v4 has one
  attention implementation, one MoE path, one sampler, CUDA graphs instead of ``torch.compile``).
  Accepted; :func:`warn_ignored_sglang_args` logs one warning at start-up naming the flags that
  were set and why they change nothing. They never change behaviour;
* ``UNSUPPORTED``: a feature sglang-v4 does not implement where ignoring it would change results
  or the API (LoRA adapters, multimodal inputs, prefill/decode disaggregation, deterministic
  inference, pipeline parallelism). Accepted by the parser so the error is a clear
  ``ValueError`` from validation naming the flag, not argparse's "unrecognized arguments";
* ``MAPPED``: another SGLang spelling of a behaviour sglang-v4 has; :func:`apply_sglang_semantics`
  sets the ``ServerArgs`` field it means (``--disable-decode-cuda-graph`` ->
  ``disable_cuda_graph``);
* anything else: argparse's "unrecognized arguments" error (typos must not pass silently).

Speculative decoding (``--speculative-algorithm EAGLE`` / ``MTP`` / ``NGRAM`` and its knobs) is
``IGNORED`` on purpose: speculative decoding in SGLang is lossless (the target model verifies
every draft token, so greedy outputs are the same and sampled outputs have the same distribution);
it only changes speed. Refusing it would make every published DeepSeek-V4 recipe fail to start
for a difference in speed alone, so the flags are accepted and the start-up warning says that
decoding runs one token per step.

``--enable-dp-attention`` changes what ``--dp-size`` means in SGLang: the DP ranks split the
attention of one ``--tp-size`` group (the same GPUs), not ``dp_size`` server replicas. With it set,
:func:`apply_sglang_semantics` resets ``dp_size`` to 1 (one server on the ``--tp-size`` GPUs the
SGLang command uses) and the warning says so.

The entries (:class:`~sglang_v4.server_args_compat_flag.SGLangFlag`) live in
:mod:`~sglang_v4.server_args_compat_kernels` (ignored kernel / backend / layout choices),
:mod:`~sglang_v4.server_args_compat_runtime` (ignored runtime services) and
:mod:`~sglang_v4.server_args_compat_refused` (unsupported and mapped flags); each is parsed as SGLang
0.5.23 parses it (value type, ``nargs``, switches and their ``--no-`` forms). Passing SGLang's
default value of a flag counts as not setting it. The table also generates the dataclass fields
(:data:`SGLangCompatArgs`, a base of ``ServerArgs``) and the argparse flags, so
``Engine(attention_backend="fa3")`` and ``--attention-backend fa3`` behave the same.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
from collections.abc import Mapping, MutableMapping
from typing import Any

from sglang_v4.server_args_compat_flag import IGNORED, MAPPED, UNSUPPORTED, SGLangFlag
from sglang_v4.server_args_compat_kernels import KERNEL_FLAGS
from sglang_v4.server_args_compat_refused import REFUSED_FLAGS
from sglang_v4.server_args_compat_runtime import RUNTIME_FLAGS

__all__ = [
    "IGNORED",
    "MAPPED",
    "REDACTED",
    "SECRET_COMPAT_FIELDS",
    "UNSUPPORTED",
    "SGLANG_FLAGS",
    "SGLangFlag",
]

#: Every accepted SGLang-only flag (SGLang 0.5.23's, and older spellings of its DeepSeek recipes).
SGLANG_FLAGS: tuple[SGLangFlag, ...] = KERNEL_FLAGS + RUNTIME_FLAGS + REFUSED_FLAGS

#: SGLang's ``--cuda-graph-backend-decode`` choices.
CUDA_GRAPH_BACKENDS = ("full", "breakable", "disabled")

#: ``dest`` -> entry.
SGLANG_FLAG_BY_DEST: dict[str, SGLangFlag] = {f.dest: f for f in SGLANG_FLAGS}

#: Dataclass base of ``ServerArgs``: one field per table entry, ``None`` (``False`` for switches)
#: by default, so ``ServerArgs`` and ``Engine`` take the same keywords as the CLI.
#: The accepted SGLang fields whose value holds a secret (SGLang's ``WATERMARK_SECRET_FIELD_NAMES``
#: that are flags: ``--watermark-config`` carries the watermark keys): left out of ``repr``, shown
#: as :data:`REDACTED` by ``ServerArgs.to_dict`` (``/server_info``) and the ignored-flags warning.
SECRET_COMPAT_FIELDS = frozenset({"watermark_config"})
#: What a secret's value is shown as (SGLang's marker).
REDACTED = "<redacted>"

SGLangCompatArgs = dataclasses.make_dataclass(
    "SGLangCompatArgs",
    [
        (
            f.dest,
            Any,
            dataclasses.field(default=False if f.switch else None, repr=f.dest not in SECRET_COMPAT_FIELDS),
        )
        for f in SGLANG_FLAGS
    ],
)
SGLangCompatArgs.__doc__ = "The accepted SGLang-only fields (see :data:`SGLANG_FLAGS`)."
SGLangCompatArgs.__module__ = __name__


def _is_set(entry: SGLangFlag, value: Any) -> bool:
    """Whether ``value`` asks for something: not unset (``None`` / ``False`` / no values) and not
    SGLang's own default for the flag."""
    if value is None or value is False or value == []:
        return False
    return entry.default is None or value != entry.default


def add_sglang_cli_args(parser: argparse.ArgumentParser) -> None:
    """Add every :data:`SGLANG_FLAGS` entry to ``parser``, parsed as SGLang parses it: a switch as
    ``store_true`` (a negatable one as ``BooleanOptionalAction``, so ``--no-<name>`` too), any other
    with SGLang's ``type``, ``nargs`` and ``choices``; unset flags parse to ``None`` / ``False``."""
    group = parser.add_argument_group(
        "SGLang compatibility",
        "SGLang flags accepted so SGLang launch commands start unchanged (see README).",
    )
    for f in SGLANG_FLAGS:
        help_text = f"[{f.kind}] {f.note}"
        names = (f.flag, *f.aliases)
        if f.switch:
            action = argparse.BooleanOptionalAction if f.negatable else "store_true"
            group.add_argument(*names, dest=f.dest, action=action, default=False, help=help_text)
            continue
        extra: dict[str, Any] = {"const": f.const} if f.nargs == "?" else {}
        group.add_argument(
            *names,
            dest=f.dest,
            type=f.type,
            nargs=f.nargs,
            choices=f.choices,
            default=None,
            help=help_text,
            **extra,
        )


def check_sglang_args(args: Any) -> None:
    """Raise ``ValueError`` for the first set :data:`UNSUPPORTED` flag on ``args`` (a
    ``ServerArgs``): ``"enable_lora (--enable-lora) is not supported: LoRA adapters ..."``."""
    for f in SGLANG_FLAGS:
        value = getattr(args, f.dest)
        if f.kind == UNSUPPORTED and _is_set(f, value):
            raise ValueError(f"{f.dest} ({f.flag} {value!r}) is not supported: {f.note}")


def apply_sglang_semantics(args: Any) -> None:
    """Map the accepted SGLang flags whose meaning reaches a ``ServerArgs`` field, in place:
    ``enable_dp_attention`` with ``dp_size > 1`` -> ``dp_size = 1`` (module docstring);
    ``disable_decode_cuda_graph``, ``cuda_graph_backend_decode="disabled"`` or
    ``cuda_graph_config={"decode": {"backend": "disabled"}}`` -> ``disable_cuda_graph = True``;
    ``fastapi_root_path`` -> ``root_path`` (when that is not set itself).

    Raises:
        ValueError: naming ``cuda_graph_backend_decode`` / ``cuda_graph_config`` when a backend is
            not one of SGLang's choices or the config is not a JSON object of per-phase objects.
    """
    if args.enable_dp_attention and args.dp_size != 1:
        args.sglang_dp_attention_size = args.dp_size
        args.dp_size = 1
    backend = args.cuda_graph_backend_decode
    if backend is not None and backend not in CUDA_GRAPH_BACKENDS:
        raise ValueError(
            f"cuda_graph_backend_decode must be one of {list(CUDA_GRAPH_BACKENDS)} (got {backend!r})"
        )
    config_backend = _cuda_graph_config_decode_backend(args.cuda_graph_config)
    if args.disable_decode_cuda_graph or "disabled" in (backend, config_backend):
        args.disable_cuda_graph = True
    if args.fastapi_root_path and not args.root_path:
        args.root_path = args.fastapi_root_path


def _cuda_graph_config_decode_backend(config: Any) -> str | None:
    """The ``decode`` phase's ``backend`` of SGLang's ``--cuda-graph-config`` (a dict, or its JSON
    text from ``Engine(cuda_graph_config=...)``); ``None`` when unset."""
    if config is None:
        return None
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as e:
            raise ValueError(f"cuda_graph_config must be a JSON object ({e}): {config!r}") from None
    if not isinstance(config, dict) or not all(isinstance(v, dict) for v in config.values()):
        raise ValueError(f"cuda_graph_config must be a JSON object of per-phase objects (got {config!r})")
    backend = config.get("decode", {}).get("backend")
    if backend is not None and backend not in CUDA_GRAPH_BACKENDS:
        raise ValueError(
            f"cuda_graph_config: decode backend must be one of {list(CUDA_GRAPH_BACKENDS)} (got {backend!r})"
        )
    return backend


def ignored_sglang_args(args: Any) -> list[tuple[str, Any, str]]:
    """``(flag, value, note)`` of every :data:`IGNORED` flag set on ``args``, table order."""
    out = []
    for f in SGLANG_FLAGS:
        value = getattr(args, f.dest)
        if f.kind == IGNORED and _is_set(f, value):
            if f.dest == "enable_dp_attention" and getattr(args, "sglang_dp_attention_size", None):
                value = f"dp-size {args.sglang_dp_attention_size} -> 1"
            out.append((f.flag, value, f.note))
    return out


def _as_given(value: Any) -> str:
    """``value`` as it would be written after its flag: nothing for a switch, list items separated by
    spaces, JSON values as JSON."""
    if value is True:
        return ""
    if isinstance(value, list):
        return " " + " ".join(json.dumps(v) if isinstance(v, (dict, list)) else str(v) for v in value)
    return " " + (json.dumps(value) if isinstance(value, dict) else str(value))


def warn_ignored_sglang_args(args: Any, log: logging.Logger | None = None) -> str | None:
    """Log one warning listing the :data:`IGNORED` flags set on ``args`` and why; return its text
    (``None`` when none is set)."""
    items = ignored_sglang_args(args)
    if not items:
        return None
    lines = [
        f"  {flag}{' ' + REDACTED if flag[2:].replace('-', '_') in SECRET_COMPAT_FIELDS else _as_given(value)}: "
        f"{note}"
        for flag, value, note in items
    ]
    text = "SGLang flags accepted but ignored (behaviour unchanged):\n" + "\n".join(lines)
    (log or logging.getLogger("sglang_v4.server_args")).warning("%s", text)
    return text


#: SGLang environment variables sglang-v4 reads (``SGLANG_V4_*`` are its own and always read).
#: (the request timeouts of ``managers/request_timeouts.py`` with their deprecated millisecond
#: names, and the slow-request log threshold of ``managers/request_log.py`` among them)
READ_SGLANG_ENV = frozenset(
    {
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
        "SGLANG_HEALTH_CHECK_TIMEOUT",
        "SGLANG_TORCH_PROFILER_DIR",
        "SGLANG_REQ_WAITING_TIMEOUT",
        "SGLANG_REQ_RUNNING_TIMEOUT",
        "SGLANG_QUEUED_TIMEOUT_MS",
        "SGLANG_FORWARD_TIMEOUT_MS",
        "SGLANG_LOG_REQUEST_EXCEEDED_MS",
    }
)


#: SGLang's legacy prefix: its ``environ.py`` reads every ``SGL_<NAME>`` as ``SGLANG_<NAME>``.
LEGACY_SGLANG_ENV_PREFIX = "SGL_"


def _current_sglang_name(name: str) -> str | None:
    """``SGLANG_<NAME>`` for a legacy ``SGL_<NAME>`` whose current name this server reads, else None."""
    if not name.startswith(LEGACY_SGLANG_ENV_PREFIX):
        return None
    current = "SGLANG_" + name[len(LEGACY_SGLANG_ENV_PREFIX) :]
    return current if current in READ_SGLANG_ENV else None


def apply_legacy_sglang_env(
    environ: MutableMapping[str, str] | None = None, log: logging.Logger | None = None
) -> dict[str, str]:
    """Read SGLang's legacy ``SGL_<NAME>`` spelling of the variables in :data:`READ_SGLANG_ENV`,
    as SGLang does (``environ.py``'s ``_handle_deprecated_envs`` copies every ``SGL_<NAME>`` to
    ``SGLANG_<NAME>`` and warns that the old name is deprecated): each such legacy variable set
    in ``environ`` (default ``os.environ``, so that the server's processes inherit it) is copied
    to its ``SGLANG_`` name, unless that name is set too (the current name then wins), and one
    warning names every legacy variable and its current name. Call once at start-up, before any
    of the variables is read.

    Returns:
        ``{legacy name: current name}`` of the legacy variables found.
    """
    env = os.environ if environ is None else environ
    found = {k: c for k in sorted(env) if (c := _current_sglang_name(k)) is not None}
    for legacy, current in found.items():
        if current not in env:
            env[current] = env[legacy]
    if found:
        (log or logging.getLogger("sglang_v4.server_args")).warning(
            "Deprecated SGLang environment variable name(s): %s",
            "; ".join(
                f"{legacy} is read as {current}"
                + (f" (ignored: {current} is set too)" if env[current] != env[legacy] else "")
                for legacy, current in found.items()
            ),
        )
    return found


def unread_sglang_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """Sorted names of the ``SGL_*`` / ``SGLANG_*`` variables set in ``environ`` (default
    ``os.environ``) that sglang-v4 does not read: SGLang's kernel, backend and tuning switches
    (``SGL_ENABLE_JIT_DEEPGEMM``, ``SGLANG_ENABLE_SPEC_V2``, ...) copied with a launch command.
    A legacy ``SGL_<NAME>`` of a variable it reads is read (:func:`apply_legacy_sglang_env`)."""
    env = os.environ if environ is None else environ
    return sorted(
        k
        for k in env
        if k.startswith(("SGL_", "SGLANG_"))
        and not k.startswith("SGLANG_V4_")
        and k not in READ_SGLANG_ENV
        and _current_sglang_name(k) is None
    )


def warn_unread_sglang_env(
    environ: Mapping[str, str] | None = None, log: logging.Logger | None = None
) -> str | None:
    """Log one warning naming the :func:`unread_sglang_env` variables; return its text (``None``
    when there are none)."""
    names = unread_sglang_env(environ)
    if not names:
        return None
    text = (
        f"SGLang environment variables set but not read by sglang-v4 (behaviour unchanged): {', '.join(names)}; "
        f"it reads {', '.join(sorted(READ_SGLANG_ENV))} and its own SGLANG_V4_* variables"
    )
    (log or logging.getLogger("sglang_v4.server_args")).warning("%s", text)
    return text
