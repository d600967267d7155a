"""Per-request sampling parameters, with SGLang 0.5.x field names, defaults and validation.

Semantics follow SGLang's ``srt/sampling/sampling_params.py`` (read for behaviour, not copied):

* Every field accepts ``None`` meaning "use the default" (the SGLang frontend client sends nulls).
  ``max_new_tokens=None`` keeps SGLang's meaning: no explicit limit, generation runs until the
  context length (the scheduler caps it; see :meth:`SamplingParams.max_new_tokens_for`).
* ``temperature`` in ``[0, 1e-6)`` means greedy: it is turned into ``temperature=1.0, top_k=1`` at
  construction, as SGLang does, so downstream code never divides by zero.
* ``top_k=-1`` (the default) means "the whole vocabulary".
* ``stop`` (a string or a list of strings) is an API alias; :meth:`SamplingParams.normalize` copies it
  to ``stop_strs`` (always a list) and computes ``stop_str_max_len`` (the most output tokens a stop
  string can span) for the stop checker.

Errors: construction, :meth:`from_dict` and :meth:`verify` raise ``ValueError`` whose message names the
offending field, which the HTTP layers turn into a 400.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from sglang_v4.sampling.token_masks import check_token_constraints, normalize_token_lists

__all__ = [
    "SamplingParams",
    "TOP_K_ALL",
    "LOGIT_BIAS_MAX",
    "derive_choice_seed",
    "MAX_STOP_COUNT",
    "MAX_STOP_REGEX_LEN",
    "MAX_N",
    "SAMPLING_EPS",
    "GRAMMAR_UNAVAILABLE_MSG",
    "check_structural_tag",
]

SAMPLING_EPS = 1e-6
"""Temperatures below this (and >= 0) are treated as greedy decoding."""

TOP_K_ALL = -1
"""``top_k`` value meaning "no top-k truncation" (SGLang's API value)."""

MAX_STOP_COUNT = 32
"""At most this many stop strings per request (SGLang's limit); the same bound holds for
``stop_regex`` patterns."""

MAX_STOP_REGEX_LEN = 256
"""At most this many bytes (UTF-8) per ``stop_regex`` pattern (SGLang's limit): the stop checker
searches every pattern on every decode step, so its size is bounded like its count."""

MAX_N = 128
"""At most this many parallel samples per request (``n``)."""

LOGIT_BIAS_MAX = 100.0
"""``logit_bias`` values lie in ``[-LOGIT_BIAS_MAX, LOGIT_BIAS_MAX]`` (OpenAI's documented range;
-100 already bans a token and +100 forces it, larger magnitudes only risk float overflow)."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def vocab_range(vocab_size: int | None) -> str:
    """The token-id range of a vocabulary for error messages: ``"in [0, V) (vocab_size V)"``
    (the size itself is named, as vLLM's range errors name it), ``"at least 0"`` when unknown."""
    return "at least 0" if vocab_size is None else f"in [0, {vocab_size}) (vocab_size {vocab_size})"


def derive_choice_seed(seed: int, index: int) -> int:
    """The ``sampling_seed`` of parallel sample ``index`` (0-based) of a request seeded with ``seed``.

    Rule (vLLM's for ``n > 1`` with a seed): ``seed + index``, wrapped into the signed 64-bit range
    that ``sampling_seed`` allows. Sample 0 keeps ``seed``, so ``n=1`` and the first of ``n``
    samples are the same draw, and each sample of ``n`` equals a single request with its seed.

    Raises:
        ValueError: ``index`` is negative.
    """
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    return (seed + index - _INT64_MIN) % 2**64 + _INT64_MIN


#: ``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag`` on a server whose scheduler has no
#: grammar backend (xgrammar is a dependency; this happens only when it failed to import).
GRAMMAR_UNAVAILABLE_MSG = (
    "constrained decoding ({field}) is not supported on this server without the xgrammar package: "
    "install it where the server runs (pip install xgrammar)"
)

# Fields whose ``None`` means "default"; the value is the default used.
_SCALAR_DEFAULTS: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": TOP_K_ALL,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "ignore_eos": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "no_stop_trim": False,
}
_FLOAT_FIELDS = (
    "temperature",
    "top_p",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
)
_INT_FIELDS = ("top_k", "min_new_tokens", "n")
_BOOL_FIELDS = ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _as_float(name: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(x).__name__} {x!r}.")
    return float(x)


def _as_int(name: str, x: Any) -> int:
    # Accept integral floats such as 16.0 (JSON clients sometimes send them), reject 1.5 / "3" / True.
    if _is_int(x):
        return int(x)
    if isinstance(x, float) and x.is_integer():
        return int(x)
    raise ValueError(f"{name} must be an integer, got {type(x).__name__} {x!r}.")


@dataclass
class SamplingParams:
    """Sampling parameters of one request (SGLang 0.5.x field names and defaults).

    API fields (set by callers; ``None`` means default):
        max_new_tokens: int | None = 128. Upper bound on generated tokens; ``None`` = until context end.
        stop: str | list[str] | None. Stop strings (API alias of ``stop_strs``).
        stop_token_ids: list[int] | set[int] | None. Extra token ids that end generation.
        stop_regex: str | list[str] | None. Regular expressions that end generation when matched
            in the decoded output tail.
        stop_str_after_token_id: int | None. When set, ``stop`` / ``stop_regex`` are matched only
            in the output that follows the first occurrence of this token id (earlier output, and
            the token itself, never match); token stops are unaffected. The chat route sets it to
            the ``</think>`` id in thinking mode, so a stop string applies to the answer, not to the
            reasoning (the fix of vLLM #14170 / SGLang #40529). An extension, not in SGLang.
        temperature: float >= 0 = 1.0. Values < 1e-6 mean greedy.
        top_p: float in (0, 1] = 1.0. Nucleus sampling mass.
        top_k: int = -1. ``-1`` = whole vocabulary, else >= 1.
        min_p: float in [0, 1] = 0.0. Drop tokens with ``p < min_p * p_max``.
        frequency_penalty, presence_penalty: float in [-2, 2] = 0.0. OpenAI-style penalties over
            output tokens.
        repetition_penalty: float in (0, 2] = 1.0. CTRL-style penalty over prompt+output tokens.
        min_new_tokens: int >= 0 = 0. EOS / stop tokens are masked until this many tokens exist,
            and stop strings / regexes match only in the text after the first this many tokens.
        n: int in [1, MAX_N] = 1. Parallel samples.
        json_schema, regex, ebnf, structural_tag: str | None. Constrained decoding (at most one;
            applied by :mod:`sglang_v4.sampling.grammar`; ``structural_tag`` is xgrammar's JSON).
        grammar_prefix: str | None. Text the grammar has read before the first generated token:
            the output continues it (the chat route sets it to the assistant message a
            ``continue_final_message`` / ``prefix`` request continues, so that message and the
            continuation together follow the grammar). Needs one of the grammar fields; text the
            grammar rejects is a ``ValueError`` when the grammar is built. An extension, not in
            SGLang.
        ignore_eos: bool = False. Do not stop on the tokenizer's EOS.
        skip_special_tokens: bool = True. Detokenization option.
        spaces_between_special_tokens: bool = True. Detokenization option.
        no_stop_trim: bool = False. Keep the matched stop string / token in the output text.
        stream_interval: int | None. Streaming chunk interval (tokens) override.
        logit_bias: dict[str|int, float] | None. Additive bias per token id; keys are token ids
            (ints or decimal strings) in ``[0, vocab)``, values finite in ``[-100, 100]``.
        sampling_seed: int | None. Per-request seed for reproducible sampling, in the signed
            64-bit range. With ``n > 1`` sample ``k`` uses :func:`derive_choice_seed` (seed + k).
        custom_params: dict | None. Opaque user data (kept, not interpreted).
        allowed_token_ids: list[int] | None. Only these token ids may be generated (vLLM's
            field; ids in ``[0, vocab)``). An extension, not in SGLang.
        bad_words_ids: list[list[int]] | None. Token sequences never generated: a sequence's last
            token is banned where its other tokens end the output (vLLM's ``bad_words``, which the
            OpenAI routes tokenize into these). An extension, not in SGLang.
            :mod:`sglang_v4.sampling.token_masks` applies and checks both; ``[]`` means unset.
        beam_width: int | None. Only ``None``/``1`` accepted (beam search not supported).
        thinking_token_budget: int | None. vLLM's field: at most this many reasoning tokens; then
            the think-end token is forced (:mod:`sglang_v4.sampling.thinking_budget`). ``None`` or
            ``-1``: unlimited; else at least 0. Bounds each reasoning section (the prompt's, and any
            ``<think>`` the output opens). An extension, not in SGLang.

    Internal fields (filled by :meth:`normalize`): ``stop_strs`` (list[str]), ``stop_regex_strs``
    (list[str]), ``stop_str_max_len`` (the most output tokens a stop string can span), ``is_normalized``.
    """

    max_new_tokens: int | None = 128
    stop: str | list[str] | None = None
    stop_token_ids: set[int] | None = None
    stop_regex: str | list[str] | None = None
    stop_str_after_token_id: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = TOP_K_ALL
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    n: int = 1
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    grammar_prefix: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    sampling_seed: int | None = None
    custom_params: dict[str, Any] | None = None
    beam_width: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words_ids: list[list[int]] | None = None
    thinking_token_budget: int | None = None

    # --- internal (set by normalize) ---
    stop_strs: list[str] | None = field(default=None, repr=False)
    stop_regex_strs: list[str] | None = field(default=None, repr=False)
    stop_str_max_len: int = field(default=0, repr=False)
    is_normalized: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        """Replace ``None`` by defaults, type-check scalars, and map temperature 0 to greedy.

        Raises:
            ValueError: a field has the wrong type (the message names the field).
        """
        if self.is_normalized:
            return
        for name, default in _SCALAR_DEFAULTS.items():
            if getattr(self, name) is None:
                setattr(self, name, default)
        for name in _FLOAT_FIELDS:
            setattr(self, name, _as_float(name, getattr(self, name)))
        for name in _INT_FIELDS:
            setattr(self, name, _as_int(name, getattr(self, name)))
        for name in _BOOL_FIELDS:
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be a boolean, got {type(v).__name__} {v!r}.")
        if self.max_new_tokens is not None:
            self.max_new_tokens = _as_int("max_new_tokens", self.max_new_tokens)
        for name in (
            "sampling_seed",
            "stream_interval",
            "beam_width",
            "stop_str_after_token_id",
            "thinking_token_budget",
        ):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, _as_int(name, v))

        # stop / stop_regex: str or list of str
        for name in ("stop", "stop_regex"):
            v = getattr(self, name)
            if v is None or isinstance(v, str):
                continue
            if isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v):
                setattr(self, name, list(v))
                continue
            raise ValueError(f"{name} must be a string or a list of strings, got {v!r}.")
        self.stop_strs = self.stop if self.stop_strs is None else self.stop_strs
        self.stop_regex_strs = self.stop_regex if self.stop_regex_strs is None else self.stop_regex_strs

        if self.stop_token_ids:
            if isinstance(self.stop_token_ids, (str, bytes)) or not hasattr(self.stop_token_ids, "__iter__"):
                raise ValueError(f"stop_token_ids must be a list of integers, got {self.stop_token_ids!r}.")
            ids = {_as_int("stop_token_ids", t) for t in self.stop_token_ids if t is not None}
            self.stop_token_ids = ids or None
        else:
            self.stop_token_ids = None

        if self.logit_bias is not None and not isinstance(self.logit_bias, dict):
            raise ValueError(
                f"logit_bias must be an object mapping token ids to floats, got {self.logit_bias!r}."
            )
        self.allowed_token_ids, self.bad_words_ids = normalize_token_lists(
            self.allowed_token_ids, self.bad_words_ids
        )
        if self.custom_params is not None and not isinstance(self.custom_params, dict):
            raise ValueError(f"custom_params must be an object, got {self.custom_params!r}.")

        # A grammar field is a non-empty string or unset: an empty regex / ebnf / schema names no
        # grammar (xgrammar would reject it or constrain the output to nothing), so it is a 400.
        # Only the EBNF and JSON texts are empty when they hold only whitespace: a regex of
        # whitespace (" ", "\n") is a pattern whose language is that whitespace.
        for name in ("json_schema", "regex", "ebnf", "structural_tag"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise ValueError(f"{name} must be a string, got {type(v).__name__}.")
            if v is not None and (v == "" if name == "regex" else not v.strip()):
                raise ValueError(f"{name} must not be empty (leave it unset for unconstrained output).")

        if 0.0 <= self.temperature < SAMPLING_EPS:
            # Greedy: argmax of the (penalized) logits. Same mapping as SGLang.
            self.temperature = 1.0
            self.top_k = 1

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> set[str]:
        """Names accepted by :meth:`from_dict` (the public API fields)."""
        return {f.name for f in dataclasses.fields(cls) if f.repr}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SamplingParams:
        """Build from a JSON-like dict (the ``sampling_params`` of ``/generate``).

        Args:
            d: mapping of field name to value; ``None`` or ``{}`` gives all defaults.

        Raises:
            ValueError: ``d`` is not a dict, has an unknown key (named in the message), or a value
                of the wrong type.
        """
        if d is None:
            return cls()
        if isinstance(d, SamplingParams):
            return dataclasses.replace(d)
        if not isinstance(d, dict):
            raise ValueError(f"sampling_params must be an object, got {type(d).__name__}.")
        allowed = cls.field_names()
        unknown = sorted(k for k in d if k not in allowed)
        if unknown:
            raise ValueError(
                f"Unknown sampling parameter(s): {', '.join(map(str, unknown))}. "
                f"Allowed: {', '.join(sorted(allowed))}."
            )
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """The public API fields as a plain dict (``stop_token_ids`` as a sorted list)."""
        out = {name: getattr(self, name) for name in self.field_names()}
        if out["stop_token_ids"] is not None:
            out["stop_token_ids"] = sorted(out["stop_token_ids"])
        return out

    # ------------------------------------------------------------------ checks
    @property
    def is_greedy(self) -> bool:
        """True when the sampler takes the argmax (``top_k == 1``; temperature 0 maps there)."""
        return self.top_k == 1

    def verify(self, vocab_size: int | None = None, allow_grammar: bool = False) -> None:
        """Range checks, as SGLang's ``SamplingParams.verify``.

        Args:
            vocab_size: model vocabulary size; when given, ``stop_token_ids``, ``logit_bias``
                keys, ``allowed_token_ids`` and ``bad_words_ids`` must lie in ``[0, vocab_size)``.
            allow_grammar: accept ``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag`` (pass
                True only where the scheduler applies them with :mod:`sglang_v4.sampling.grammar`);
                otherwise they are rejected as not supported.

        Raises:
            ValueError: naming the first bad field.
        """
        if not math.isfinite(self.temperature) or self.temperature < 0.0:
            raise ValueError(f"temperature must be a non-negative finite number, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if not (self.top_k == TOP_K_ALL or self.top_k >= 1):
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ValueError(
                f"repetition_penalty must be in (0, 2] (1.0 = no penalty), got {self.repetition_penalty}."
            )
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be in [0, max_new_tokens], got {self.min_new_tokens}.")
        if self.max_new_tokens is not None:
            if self.max_new_tokens < 0:
                raise ValueError(f"max_new_tokens must be at least 0, got {self.max_new_tokens}.")
            if self.min_new_tokens > self.max_new_tokens:
                raise ValueError(
                    f"min_new_tokens must be in [0, max_new_tokens({self.max_new_tokens})], got {self.min_new_tokens}."
                )
        if not 1 <= self.n <= MAX_N:
            raise ValueError(f"n must be in [1, {MAX_N}], got {self.n}.")
        if self.beam_width is not None and self.beam_width != 1:
            raise ValueError(f"beam_width: beam search is not supported, got {self.beam_width}.")
        if self.thinking_token_budget is not None and self.thinking_token_budget < -1:
            raise ValueError(
                f"thinking_token_budget must be -1 (unlimited) or at least 0, got {self.thinking_token_budget}."
            )
        if self.stream_interval is not None and self.stream_interval < 1:
            raise ValueError(f"stream_interval must be at least 1, got {self.stream_interval}.")
        if self.sampling_seed is not None and not _INT64_MIN <= self.sampling_seed <= _INT64_MAX:
            # the bracketed tag is pydantic's error type for the bound crossed, as vLLM's 400 names it
            bound = "greater_than_equal" if self.sampling_seed < _INT64_MIN else "less_than_equal"
            raise ValueError(
                f"sampling_seed must be in [-2**63, 2**63 - 1], got {self.sampling_seed} [type={bound}]."
            )
        stops = self.stop_strs if self.stop_strs is not None else self.stop
        if isinstance(stops, list):
            if len(stops) > MAX_STOP_COUNT:
                raise ValueError(
                    f"stop: at most {MAX_STOP_COUNT} stop strings are allowed, got {len(stops)}."
                )
            if any(s == "" for s in stops):
                raise ValueError("stop: stop strings must be non-empty.")
        elif stops == "":
            raise ValueError("stop: stop strings must be non-empty.")
        _verify_stop_regex(self.stop_regex_strs if self.stop_regex_strs is not None else self.stop_regex)
        if self.stop_token_ids:
            for t in self.stop_token_ids:
                if t < 0 or (vocab_size is not None and t >= vocab_size):
                    raise ValueError(f"stop_token_ids must be token ids {vocab_range(vocab_size)}, got {t}.")
        t = self.stop_str_after_token_id
        if t is not None and (t < 0 or (vocab_size is not None and t >= vocab_size)):
            hi = "" if vocab_size is None else f", {vocab_size - 1}"
            raise ValueError(f"stop_str_after_token_id must be in [0{hi}], got {t}.")
        if self.logit_bias is not None:
            # every key that is no token id is named at once (vLLM reports them together)
            bad_keys = [
                k
                for k in self.logit_bias
                if isinstance(k, bool)
                or not (_is_int(k) or (isinstance(k, str) and k.isascii() and k.lstrip("-").isdigit()))
            ]
            if bad_keys:
                raise ValueError(
                    f"logit_bias keys must be token ids, got {', '.join(repr(k) for k in bad_keys)}."
                )
            for k, v in self.logit_bias.items():
                tid = int(k)
                if tid < 0 or (vocab_size is not None and tid >= vocab_size):
                    raise ValueError(f"logit_bias keys must be token ids {vocab_range(vocab_size)}, got {k}.")
                bias = _as_float(f"logit_bias[{k}]", v)
                if not -LOGIT_BIAS_MAX <= bias <= LOGIT_BIAS_MAX:  # NaN fails too
                    raise ValueError(
                        f"logit_bias values must be in [-{LOGIT_BIAS_MAX:g}, {LOGIT_BIAS_MAX:g}], "
                        f"got {v!r} for token {k}."
                    )
        check_token_constraints(self.allowed_token_ids, self.bad_words_ids, vocab_size)
        grammars = [
            n for n in ("json_schema", "regex", "ebnf", "structural_tag") if getattr(self, n) is not None
        ]
        if len(grammars) > 1:
            raise ValueError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")
        if grammars and grammars[0] == "structural_tag":
            check_structural_tag(self.structural_tag)
        if self.grammar_prefix is not None:
            if not isinstance(self.grammar_prefix, str):
                raise ValueError(
                    f"grammar_prefix must be a string, got {type(self.grammar_prefix).__name__}."
                )
            if not grammars:
                raise ValueError("grammar_prefix needs one of json_schema, regex, ebnf or structural_tag.")
        if grammars and not allow_grammar:
            raise ValueError(GRAMMAR_UNAVAILABLE_MSG.format(field=grammars[0]))

    def normalize(self, tokenizer: Any | None) -> None:
        """Turn API aliases into internal fields (idempotent).

        ``stop`` -> ``stop_strs`` (list), ``stop_str_max_len`` = the most output tokens a stop string
        can span: its UTF-8 length in bytes (at least its own token count,
        ``tokenizer.encode(s, add_special_tokens=False)``). The model may write a stop string in
        more tokens than its own encoding has -- one per character or per byte (byte-level BPE) --
        and every token covers at least one byte of text, so a window of that many tokens sees
        the whole string (a window of its own token count missed "stop" written s, t, o, p).
        ``stop_regex`` -> ``stop_regex_strs`` (list). Greedy mapping is already done at construction.

        Raises:
            ValueError: more than ``MAX_STOP_COUNT`` stop strings, or an empty stop string.
        """
        if self.is_normalized:
            return
        stops = self.stop_strs
        if stops is None:
            stops = []
        elif isinstance(stops, str):
            stops = [stops]
        if len(stops) > MAX_STOP_COUNT:
            raise ValueError(f"stop: at most {MAX_STOP_COUNT} stop strings are allowed, got {len(stops)}.")
        if any(s == "" for s in stops):
            raise ValueError("stop: stop strings must be non-empty.")
        max_len = 0
        for s in stops:
            n = len(s.encode("utf-8", errors="surrogatepass"))
            if tokenizer is not None:
                enc = tokenizer.encode(s, add_special_tokens=False)
                n = max(n, len(getattr(enc, "ids", enc)))  # tokenizers.Tokenizer returns an Encoding
            max_len = max(max_len, n)
        self.stop_strs = list(stops)
        self.stop_str_max_len = max_len

        regs = self.stop_regex_strs
        if regs is None:
            regs = []
        elif isinstance(regs, str):
            regs = [regs]
        self.stop_regex_strs = list(regs)

        self.stop = None
        self.stop_regex = None
        self.is_normalized = True

    def max_new_tokens_for(self, prompt_len: int, context_len: int) -> int:
        """Effective generation budget: ``max_new_tokens`` capped by the room left in the context.

        Args:
            prompt_len: prompt tokens.
            context_len: model context length in tokens.

        Returns:
            ``min(max_new_tokens, context_len - prompt_len)`` (``max_new_tokens=None`` = no own limit),
            never negative.
        """
        room = max(0, context_len - prompt_len)
        return room if self.max_new_tokens is None else min(self.max_new_tokens, room)


def check_structural_tag(spec: str) -> dict[str, Any]:
    """Parse a ``structural_tag`` string and check its outer shape (xgrammar checks the rest).

    Returns:
        The parsed object: ``{"type": "structural_tag", "format": {...}}`` or the older
        ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}...], "triggers": [...]}``.

    Raises:
        ValueError: not JSON, or neither shape (the message starts with ``structural_tag``).
    """
    try:
        obj = json.loads(spec)
    except (json.JSONDecodeError, TypeError) as e:
        raise ValueError(f"structural_tag must be a JSON object: {e}") from None
    if not isinstance(obj, dict) or obj.get("type", "structural_tag") != "structural_tag":
        raise ValueError('structural_tag must be a JSON object with "type": "structural_tag".')
    if isinstance(obj.get("format"), dict):
        return obj
    structures, triggers = obj.get("structures"), obj.get("triggers")
    if (
        isinstance(structures, list)
        and isinstance(triggers, list)
        and all(
            isinstance(s, dict) and isinstance(s.get("begin"), str) and isinstance(s.get("end"), str)
            for s in structures
        )
        and all(isinstance(t, str) for t in triggers)
    ):
        return obj
    raise ValueError(
        'structural_tag needs a "format" object, or "structures" ([{"begin", "schema", "end"}]) and '
        '"triggers" (strings).'
    )


def _verify_stop_regex(regs: str | list[str] | None) -> None:
    """``stop_regex`` patterns: at most :data:`MAX_STOP_COUNT`, non-empty (an empty pattern
    matches at once), at most :data:`MAX_STOP_REGEX_LEN` bytes in UTF-8 and valid Python ``re``
    syntax, what the stop checker accepts (it runs them
    with the ``re``-compatible ``regex`` engine, time-bounded, or ``re`` itself:
    :mod:`sglang_v4.sampling.stop_checker`). Checked at admission: a pattern that does not
    compile would otherwise fail inside the scheduler loop, on the first generated token.

    Raises:
        ValueError: ``"stop_regex: ..."`` naming the pattern and ``re``'s reason.
    """
    if regs is None:
        return
    pats = [regs] if isinstance(regs, str) else list(regs)
    if len(pats) > MAX_STOP_COUNT:
        raise ValueError(f"stop_regex: at most {MAX_STOP_COUNT} patterns are allowed, got {len(pats)}.")
    for pat in pats:
        if pat == "":
            raise ValueError("stop_regex: patterns must be non-empty.")
        size = len(pat.encode("utf-8", "surrogatepass")) if isinstance(pat, str) else 0
        if size > MAX_STOP_REGEX_LEN:
            raise ValueError(
                f"stop_regex: a pattern is {size} bytes, over the {MAX_STOP_REGEX_LEN}-byte limit."
            )
        try:
            re.compile(pat)
        except (re.error, OverflowError, RecursionError) as e:
            raise ValueError(f"stop_regex: invalid regular expression {pat!r}: {e}.") from None
