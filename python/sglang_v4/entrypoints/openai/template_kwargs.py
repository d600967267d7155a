"""``chat_template_kwargs`` keys that name the chat-template renderer's own arguments.

``chat_template_kwargs`` are variables for the chat template. The server renders a Jinja
``--chat-template`` with ``transformers``' ``apply_chat_template(messages, tools=...,
chat_template=..., tokenize=False, documents=..., **chat_template_kwargs)``, so a key that is one of
those arguments (or ``messages`` itself, the template's own variable) collided with the value the
server passes: Python's ``TypeError: ... got multiple values for keyword argument 'tools'``
reached the client (sgl-project/sglang#17275, vllm-project/vllm#30200). One key is worse than a
collision: ``chat_template`` would replace the server's template with the request's own Jinja
text, a template the operator never chose (vllm-project/vllm#25794, sgl-project/sglang#28135 refuse
it by default).

Such a key is refused, for a request (HTTP 400 naming ``chat_template_kwargs.KEY``) and for
``--default-chat-template-kwargs`` (a ``ValueError`` at start-up), on every prompt path, so a request
means the same whichever renderer serves it. ``add_generation_prompt`` /
``continue_final_message`` are not among them: those set the request's fields of the same name
(vLLM's reading; ``PROMPT_SWITCH_KWARGS`` of ``protocol_chat``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RENDERER_ARGUMENT_KWARGS", "check_template_kwargs"]

#: Keys of ``chat_template_kwargs`` that are arguments of the renderer, not template variables,
#: each with what to send instead.
RENDERER_ARGUMENT_KWARGS: dict[str, str] = {
    "messages": "send the conversation as the top-level 'messages' field",
    "conversation": "send the conversation as the top-level 'messages' field",
    "tools": "send the tools as the top-level 'tools' field",
    "documents": "send the documents as the top-level 'documents' field",
    "chat_template": "the chat template is the server's (--chat-template); a request cannot replace it",
    "tokenize": "the server renders the prompt as text and tokenizes it itself",
    "tokenizer_kwargs": "the server renders the prompt as text and tokenizes it itself",
    "return_dict": "the server renders the prompt as text and tokenizes it itself",
    "return_tensors": "the server renders the prompt as text and tokenizes it itself",
    "return_assistant_tokens_mask": "the server renders the prompt as text and tokenizes it itself",
    "padding": "the server renders the prompt as text and tokenizes it itself",
    "truncation": "the server renders the prompt as text and tokenizes it itself",
    "max_length": "the server renders the prompt as text and tokenizes it itself",
}


def check_template_kwargs(kwargs: Mapping[str, Any] | None, field: str) -> None:
    """Refuse a key of ``kwargs`` (a ``chat_template_kwargs`` object) that names one of the
    renderer's own arguments (:data:`RENDERER_ARGUMENT_KWARGS`).

    Args:
        kwargs: the object as sent (``None``: nothing to check).
        field: how the message names the object (``chat_template_kwargs``,
            ``default_chat_template_kwargs``).

    Raises:
        ValueError: naming ``{field}.{key}`` and what to send instead, for the first such key.
    """
    for key in kwargs or {}:
        hint = RENDERER_ARGUMENT_KWARGS.get(key)
        if hint is not None:
            raise ValueError(
                f"{field}.{key} is an argument of the chat-template renderer, not a template variable: {hint}."
            )
