"""The torch profiler around scheduler steps (SGLang's ``/start_profile`` and ``/stop_profile``).

``start`` opens a ``torch.profiler.profile`` in the scheduler process with the asked activities
(SGLang's names: ``"CPU"``, ``"GPU"`` = CUDA); every step then runs inside a
``record_function("scheduler_step")`` range; ``stop`` (or the end of ``num_steps`` steps) closes it
and writes a Chrome trace, gzip-compressed, named as SGLang names it:
``<output_dir>/<profile_id>-TP-0.trace.json.gz`` (``json.load(gzip.open(path))`` reads it;
Perfetto and ``chrome://tracing`` open it). Only rank 0 (the scheduler process) is profiled.
torch is imported when a profile starts, not with this module, so that the scheduler process of a
scheduler class without a torch model (``SGLANG_V4_SCHEDULER_CLASS``) starts without it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from sglang_v4.managers.control_struct import ProfileReq

logger = logging.getLogger(__name__)

#: ``activities`` names (SGLang's) and the names of the ``torch.profiler.ProfilerActivity`` members
#: they turn on.
ACTIVITIES = {"CPU": "CPU", "GPU": "CUDA"}


def trace_path(output_dir: str, profile_id: str) -> str:
    """Where a profile's trace goes: ``<output_dir>/<profile_id>-TP-0.trace.json.gz``."""
    return os.path.join(output_dir, f"{profile_id}-TP-0.trace.json.gz")


class SchedulerProfiler:
    """One profile at a time over the scheduler loop's steps (module docstring)."""

    def __init__(self) -> None:
        self.profiler: Any = None
        self.req: ProfileReq | None = None
        self.steps = 0

    @property
    def active(self) -> bool:
        """Whether a profile is being recorded."""
        return self.profiler is not None

    def start(self, req: ProfileReq) -> tuple[bool, str]:
        """Start recording (``req``'s fields were validated by the HTTP layer / Engine). Returns
        ``(success, message)``; refused while a profile runs, as in SGLang."""
        if self.active:
            return False, "Profiling is already in progress. Call /stop_profile first."
        assert req.output_dir is not None
        try:
            os.makedirs(req.output_dir, exist_ok=True)
        except OSError as e:
            return False, f"output_dir: cannot create {req.output_dir!r}: {e.strerror or e}"
        import torch.profiler

        acts = [getattr(torch.profiler.ProfilerActivity, ACTIVITIES[a]) for a in (req.activities or ["CPU"])]
        prof = torch.profiler.profile(
            activities=acts, with_stack=req.with_stack, record_shapes=req.record_shapes
        )
        try:
            prof.start()
        except RuntimeError as e:
            return False, str(e)
        self.profiler, self.req, self.steps = prof, req, 0
        logger.info(
            "Profiling starts. Traces will be saved to: %s", trace_path(req.output_dir, req.profile_id)
        )
        return True, "Succeeded"

    def step_range(self) -> contextlib.AbstractContextManager[Any]:
        """The context of one scheduler step: a named range while profiling, else nothing."""
        if self.profiler is None:
            return contextlib.nullcontext()
        import torch.profiler

        return torch.profiler.record_function("scheduler_step")

    def after_step(self) -> None:
        """Count a step; stop at ``num_steps`` (SGLang's automatic stop)."""
        if self.profiler is None or self.req is None:
            return
        self.steps += 1
        if self.req.num_steps is not None and self.steps >= self.req.num_steps:
            self.stop()

    def stop(self) -> tuple[bool, str]:
        """Stop recording and write the trace. Returns ``(success, message)``; refused when no
        profile runs, as in SGLang."""
        prof, req = self.profiler, self.req
        if prof is None or req is None:
            return False, "Profiling is not in progress. Call /start_profile first."
        self.profiler, self.req = None, None
        prof.stop()
        assert req.output_dir is not None
        path = trace_path(req.output_dir, req.profile_id)
        try:
            prof.export_chrome_trace(path)
        except OSError as e:
            return False, f"output_dir: cannot write the trace {path!r}: {e.strerror or e}"
        logger.info("Profiling done (%d steps). Traces are saved to: %s", self.steps, path)
        return True, f"Succeeded. Trace: {path}"
