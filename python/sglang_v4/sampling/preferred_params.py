"""SGLang's ``--preferred-sampling-params`` rule, shared by every route: the server's preferred
values fill the sampling parameters a request leaves out, and a key the request's
``sampling_params`` carries wins, an explicit ``null`` included (SGLang's tokenizer manager merges
``{**preferred, **sampling_params}``; read, not copied).

The OpenAI and Anthropic routes leave a field the client did not send out of the
``sampling_params`` they build (:func:`~sglang_v4.entrypoints.openai.request_sampling.unset_preferred_keys`),
so the same merge gives their order: the request, then the model's ``generation_config.json``
(chat), then the preferred values, then the protocol's defaults.
"""

from __future__ import annotations

from typing import Any

__all__ = ["with_preferred"]


def with_preferred(
    sampling_params: dict[str, Any] | None, preferred: dict[str, Any] | None
) -> dict[str, Any]:
    """The sampling parameters a request runs with before :class:`SamplingParams`' own defaults:
    ``{**preferred, **sampling_params}`` (a new dict; neither argument is changed).

    Args:
        sampling_params: the request's SGLang sampling parameters (``None``: none sent).
        preferred: the server's ``--preferred-sampling-params`` (``None``: the flag is unset).

    Returns:
        The merged dict; the request's keys win, ``None`` values included.
    """
    return {**(preferred or {}), **(sampling_params or {})}
