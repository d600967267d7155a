"""SGLang ``Engine`` methods beyond generation, as :class:`~sglang_v4.entrypoints.engine.Engine`
answers them.

A script written for SGLang's offline ``Engine`` (0.5.23) calls more than ``generate``. Here:

- ``encode``, ``async_encode`` and ``rerank`` exist and raise the ``ValueError`` SGLang's
  ``TokenizerManager`` raises for an embedding or cross-encoder request on a generation model
  (:data:`~sglang_v4.entrypoints.native_api.NOT_AN_EMBEDDING_MODEL_MSG`, the text the HTTP
  routes' 400 starts with): every model sglang-v4 serves is a generation model.
- ``get_all_child_pids`` returns the engine's child process ids, as SGLang's does.
- ``pause_generation(mode)`` / ``continue_generation()``: ``/pause_generation`` and
  ``/continue_generation`` as methods.
- The methods of features this runtime does not have (:data:`UNSUPPORTED_ENGINE_METHODS`: LoRA,
  sessions, distributed / tensor weight updates, memory release, ...) are not attributes of the
  Engine, so ``hasattr`` stays ``False`` for capability checks, but reading one raises an
  ``AttributeError`` that names the method and says why, instead of Python's bare
  ``'Engine' object has no attribute ...``. The reasons are those of the matching HTTP routes in
  ``docs/SGLANG_ROUTES.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["UNSUPPORTED_ENGINE_METHODS", "EngineSGLangMethodsMixin"]

_WEIGHTS_FROM_DISK = "weights load from disk only (use update_weights_from_disk)"
_LORA = "LoRA serving is not implemented"
_SESSIONS = "SGLang's stateful sessions (session_params) are not implemented"
_EXPERT_RECORD = "SGLang's expert-load recorder serves EPLB, and there is no expert rebalancing here"
_MEMORY_SAVER = "freeing device memory between RL steps (SGLang's memory saver) is not implemented"

#: SGLang 0.5.23 ``Engine`` methods this Engine does not have -> why. Reading one on an Engine
#: raises ``AttributeError`` with the reason (:meth:`EngineSGLangMethodsMixin.__getattr__`).
UNSUPPORTED_ENGINE_METHODS: dict[str, str] = {
    "open_session": _SESSIONS,
    "close_session": _SESSIONS,
    "start_expert_distribution_record": _EXPERT_RECORD,
    "stop_expert_distribution_record": _EXPERT_RECORD,
    "dump_expert_distribution_record": _EXPERT_RECORD,
    "init_weights_update_group": f"NCCL weight broadcast from a trainer is not implemented; {_WEIGHTS_FROM_DISK}",
    "destroy_weights_update_group": f"NCCL weight broadcast from a trainer is not implemented; {_WEIGHTS_FROM_DISK}",
    "update_weights_from_distributed": f"NCCL weight broadcast from a trainer is not implemented; {_WEIGHTS_FROM_DISK}",
    "update_weights_from_tensor": f"in-process tensor weight updates are not implemented; {_WEIGHTS_FROM_DISK}",
    "update_weights_from_ipc": f"CUDA-IPC weight updates are not implemented; {_WEIGHTS_FROM_DISK}",
    "begin_weight_update": "SGLang's staged weight-update protocol is not implemented; "
    "update_weights_from_disk is one call here",
    "end_weight_update": "SGLang's staged weight-update protocol is not implemented; "
    "update_weights_from_disk is one call here",
    "load_lora_adapter": _LORA,
    "load_lora_adapter_from_tensors": _LORA,
    "unload_lora_adapter": _LORA,
    "async_load_lora_adapter": _LORA,
    "async_unload_lora_adapter": _LORA,
    "release_memory_occupation": _MEMORY_SAVER,
    "resume_memory_occupation": _MEMORY_SAVER,
    "freeze_gc": "freezing the garbage collector of the engine's processes is not implemented",
    "collective_rpc": "calling methods on the model workers of another runtime is not implemented",
    "save_remote_model": "saving the loaded model is not implemented; the checkpoint on disk is the model",
    "save_sharded_model": "saving the loaded model is not implemented; the checkpoint on disk is the model",
    "attach_tokenizer_worker": "SGLang's multi-tokenizer workers are not implemented; one Engine "
    "runs one tokenizer manager",
    "stop_grpc_server": "there is no gRPC server",
}


class EngineSGLangMethodsMixin:
    """SGLang's ``Engine`` methods beyond generation on :class:`~sglang_v4.entrypoints.engine.Engine`
    (whose attributes below they use): see the module docstring."""

    _procs: Any
    _check_open: Callable[[], None]
    _run: Callable[[Any], Any]
    tokenizer_manager: Any

    def pause_generation(self, mode: str = "abort") -> None:
        """Stop generating, as ``POST /pause_generation`` (SGLang's modes): ``"abort"`` (the
        default) aborts every request the engine holds and returns once they have ended (their
        callers get an ``abort`` finish reason); ``"in_place"`` stops the scheduler's steps, the
        requests keeping their KV; ``"retract"`` stops them and sends running requests back to
        the queue, their KV released. Requests made while paused wait until
        :meth:`continue_generation`.

        Raises:
            ValueError: a mode other than abort / retract / in_place (nothing changes).
            RuntimeError: the Engine is shut down.
        """
        from sglang_v4.entrypoints.control_api import parse_pause_body

        self._check_open()
        self._run(self.tokenizer_manager.pause_generation(parse_pause_body({"mode": mode})))

    def continue_generation(self) -> None:
        """Resume after :meth:`pause_generation` (``POST /continue_generation``): the scheduler
        steps again and the requests that waited are sent.

        Raises:
            RuntimeError: the Engine is shut down.
        """
        self._check_open()
        self._run(self.tokenizer_manager.continue_generation())

    def encode(self, prompt: Any = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """SGLang's ``Engine.encode`` (embeddings). Every model served here is a generation model,
        so this raises what SGLang raises for such a model.

        Raises:
            ValueError: always (:data:`~sglang_v4.entrypoints.native_api.NOT_AN_EMBEDDING_MODEL_MSG`).
            RuntimeError: the Engine is shut down.
        """
        from sglang_v4.entrypoints.native_api import NOT_AN_EMBEDDING_MODEL_MSG

        self._check_open()
        raise ValueError(NOT_AN_EMBEDDING_MODEL_MSG)

    async def async_encode(self, prompt: Any = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:meth:`encode` for asyncio callers; raises the same errors."""
        return self.encode(prompt, *args, **kwargs)

    def rerank(self, prompt: Any = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """SGLang's ``Engine.rerank`` (a cross-encoder's scores, an embedding request in SGLang):
        raises what SGLang raises on a generation model.

        Raises:
            ValueError: always (:data:`~sglang_v4.entrypoints.native_api.NOT_AN_EMBEDDING_MODEL_MSG`).
            RuntimeError: the Engine is shut down.
        """
        return self.encode(prompt, *args, **kwargs)

    def get_all_child_pids(self) -> list[int]:
        """Process ids of the engine's children: the scheduler (tensor-parallel rank 0), the
        detokenizer and this node's other tensor-parallel ranks, as SGLang's method returns its
        children. Still answers after :meth:`shutdown` (the ids of the stopped processes)."""
        procs = self._procs
        return [procs.scheduler.pid, procs.detokenizer.pid, *(w.process.pid for w in procs.tp_workers)]

    def __getattr__(self, name: str) -> Any:
        """Only called for a missing attribute: an ``AttributeError``, which names the method and
        the reason for SGLang's methods in :data:`UNSUPPORTED_ENGINE_METHODS`."""
        reason = UNSUPPORTED_ENGINE_METHODS.get(name)
        if reason is None:
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
            )
        raise AttributeError(
            f"Engine.{name} (an SGLang Engine method) is not supported by sglang-v4: {reason}.",
            name=name,
            obj=self,
        )
