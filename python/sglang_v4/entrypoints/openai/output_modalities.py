"""OpenAI's output-type fields of ``POST /v1/chat/completions``: ``modalities`` and ``audio``.

OpenAI's API reference: ``modalities`` lists the "output types that you would like the model to
generate" (``["text"]`` is the default; ``["text", "audio"]`` asks for audio too) and ``audio``
holds the "parameters for audio output", required when audio output is requested. This server
generates text only. ``["text"]`` (or an empty or absent list) is served as the default;
any other output type, or an ``audio`` object, is a 400 naming the field: answering such a
request with text alone (a 200 that drops what was asked) lets a client believe it got the
output it requested, and vLLM-Omni answers an unsupported output modality with a 400 too.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = ["SERVED_MODALITIES", "check_output_modalities"]

#: The output types this server generates.
SERVED_MODALITIES = ("text",)


def check_output_modalities(modalities: list[str] | None, audio: Any) -> None:
    """Refuse output types other than text.

    Args:
        modalities: the request's ``modalities`` (``None`` when not sent).
        audio: the request's ``audio`` output settings (``None`` when not sent).

    Raises:
        RequestError: 400, ``param`` ``modalities[i]`` for the first output type not in
            :data:`SERVED_MODALITIES`, or ``audio`` for an audio-output settings object.
    """
    for i, kind in enumerate(modalities or ()):
        if kind not in SERVED_MODALITIES:
            raise RequestError(
                f"modalities[{i}]: output modality {kind!r} is not supported; this model "
                "generates 'text' only.",
                param=f"modalities[{i}]",
            )
    if audio is not None:
        raise RequestError(
            "audio: audio output is not supported; this model generates 'text' only.", param="audio"
        )
