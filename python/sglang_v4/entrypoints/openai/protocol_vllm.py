"""vLLM's extra request fields of ``/v1/chat/completions`` and ``/v1/completions``.

vLLM's OpenAI-compatible server accepts fields beyond OpenAI's (its ``ChatCompletionRequest`` /
``CompletionRequest``, documented under "OpenAI-Compatible Server" -> "Extra Parameters"; read
for names, types and meaning, written independently). They are declared here, mixed into the
request models of :mod:`.protocol_chat` and :mod:`.protocol_completions`, so that each is honoured,
ignored on purpose or refused with a 400 naming it (:mod:`.vllm_fields`) instead of being dropped
silently as an unknown field. The fields SGLang and vLLM share (``top_k``, ``min_p``,
``min_tokens``, ``stop_token_ids``, ``include_stop_str_in_output``, ``priority``...) are declared
in :mod:`.protocol_base`.
The table of what each field does here is in ``docs/VLLM_FIELDS.md``. :class:`PromptLogprob` is
the one vLLM response shape the routes add (``prompt_logprobs``, :mod:`.prompt_logprobs`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "PromptLogprob",
    "StructuredOutputs",
    "VllmChatFields",
    "VllmCompletionFields",
    "VllmSamplingFields",
]


class PromptLogprob(BaseModel):
    """One token's entry in vLLM's ``prompt_logprobs`` (its ``Logprob`` dataclass): ``logprob``
    (natural log, ``-inf`` written as -9999.0), ``rank`` (1 = the most likely token of the
    vocabulary) and ``decoded_token`` (the token decoded alone; ``None`` without a tokenizer)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class StructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` object (its ``StructuredOutputsParams``): at most one of the
    constraints ``json`` (a JSON schema, object or text), ``regex``, ``choice`` (the output is
    exactly one of the strings), ``grammar`` (EBNF), ``json_object`` (any JSON object) and
    ``structural_tag`` (a JSON text), plus options. Unknown keys are a 400, as vLLM's dataclass
    refuses them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    #: vLLM's ``json`` key (a pydantic model cannot have a field named ``json``)
    json_schema: str | dict[str, Any] | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None


class VllmSamplingFields(BaseModel):
    """vLLM's extra fields shared by the chat and completions requests (defaults as vLLM's; an
    explicit ``null`` means the default, as for every optional field of the requests)."""

    use_beam_search: bool = False
    length_penalty: float = 1.0
    spaces_between_special_tokens: bool = True
    #: keep the last N prompt tokens (-1: as many as the context holds); None: no truncation
    truncate_prompt_tokens: int | None = None
    #: which end ``truncate_prompt_tokens`` cuts: "left" keeps the last tokens (None: as "left"),
    #: "right" the first ones
    truncation_side: Literal["left", "right"] | None = None
    prompt_logprobs: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    guided_json: str | dict[str, Any] | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    guided_whitespace_pattern: str | None = None
    structured_outputs: StructuredOutputs | None = None
    request_id: str | None = None
    logits_processors: list[Any] | None = None
    return_tokens_as_token_ids: bool | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    #: vLLM's bound on reasoning tokens (-1 / None: none); an integer >= -1 (check_vllm_fields).
    #: Enforced per reasoning section (the prompt's in thinking mode, and any ``<think>`` the
    #: output opens): ``</think>`` is forced after that many reasoning tokens
    #: (:mod:`sglang_v4.sampling.thinking_budget`)
    thinking_token_budget: int | None = None
    max_repetition_pattern_size: int = 0
    min_repetition_pattern_size: int = 0
    repetition_min_count: int = 0


class VllmCompletionFields(VllmSamplingFields):
    """vLLM's extra fields of ``/v1/completions`` only: ``add_special_tokens`` (default true: BOS
    as the tokenizer's config says) and ``prompt_embeds`` (refused)."""

    add_special_tokens: bool = True
    prompt_embeds: Any = None


class VllmChatFields(VllmSamplingFields):
    """vLLM's extra fields of ``/v1/chat/completions`` only: ``echo`` (the last message's content
    before the answer when the roles match), ``add_special_tokens`` (default false: special tokens
    on top of the chat template's), ``documents`` (RAG documents for a Jinja chat template),
    ``chat_template`` (refused), ``include_reasoning`` (false: no reasoning in the answer), and older vLLM versions'
    ``best_of`` and ``structural_tag``."""

    echo: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, Any]] | None = None
    chat_template: str | None = None
    include_reasoning: bool = True
    best_of: int | None = None
    #: older vLLM's top-level structural tag (a JSON text; now ``structured_outputs.structural_tag``)
    structural_tag: str | None = None
