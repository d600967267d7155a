"""Shared pieces of the stop-string test modules: a scripted generation fed one token a step
through the scheduler's finish check (``_append_token`` on ``scheduler_testutil``'s
``OutputProcessorStub``) and the detokenizer, below the HTTP layer.
"""

from __future__ import annotations

from typing import Any

from scheduler_testutil import OutputProcessorStub
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut
from sglang_v4.managers.req import Req
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import stop_text_start

#: A script with the stop string "Stop" twice and "here," once.
SCRIPT = "Stop here, then go on. Stop again at last. Done."


def generate_with_stops(tok: Any, sp: SamplingParams, ids: list[int]) -> tuple[Req, str]:
    """Feed ``ids`` one token a step to the scheduler's finish check and the detokenizer, each
    token in its own ``BatchTokenIDOut`` (a stream), until the request finishes or ``ids`` run
    out; returns the request (its ``output_ids`` end at the finish) and its final text.

    ``sp`` is normalized on ``tok`` here; the request's ``max_new_tokens`` is ``len(ids)``.
    """
    sp.normalize(tok)
    req = Req(rid="r", origin_input_ids=[5, 6], sampling_params=sp)
    req.max_new_tokens = len(ids)
    req.has_text_stops = True
    req.stop_text_start = stop_text_start(req.output_ids, sp)
    sched, detok = OutputProcessorStub(tok), DetokenizerManager(tok)
    final = None
    for t in ids:
        sched._append_token(req, t, None, None)
        out = detok.handle_batch_token_id_out(BatchTokenIDOut.from_reqs([req]))
        final = out.final_strs[0]
        if req.finished_reason is not None:
            break
    assert final is not None
    return req, final
