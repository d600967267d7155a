"""Constrained decoding (``json_schema``, ``regex``, ``ebnf``, ``structural_tag``) with xgrammar.

How it works (xgrammar, Dong et al. 2024, "XGrammar: Flexible and Efficient Structured Generation
Engine for Large Language Models"): a request's grammar is compiled once against the tokenizer's
vocabulary; a per-request ``GrammarMatcher`` tracks the parse state; before each sampling step it
fills a packed token bitmask (``int32 [B, ceil(V/32)]``) of the tokens allowed next, which is applied
to the logits (disallowed -> ``-inf``); after sampling, the chosen token is fed back with
:meth:`Grammar.accept`. The matcher allows the stop tokens (EOS) only where the grammar may end, and
is terminated once one is accepted.

Scheduler integration (per request ``req``)::

    backend = GrammarBackend(tokenizer, vocab_size=model_vocab, stop_token_ids=eos_ids)  # once
    req.grammar = backend.create(req.sampling_params)        # None without a grammar; ValueError -> 400
    ids = sample(logits, params, outs, prompts, gens, grammars=[r.grammar for r in reqs])
    for r, t in zip(reqs, ids.tolist()):
        if r.grammar is not None: r.grammar.accept(t)
    # after a retraction: r.grammar.reset() and accept the kept output tokens again.

``structural_tag`` is xgrammar's structural-tag JSON (``{"type": "structural_tag", "format":
{...}}``, or SGLang's older ``{"type": "structural_tag", "structures": [{"begin", "schema",
"end"}], "triggers": [...]}``). :func:`tool_call_structural_tag` builds the one that constrains a
DeepSeek DSML tool-call block: the call names, the DSML tags, and each argument value against its
JSON schema (xgrammar's built-in ``deepseek_v4`` format, which follows DeepSeek's reference
encoder: parameters in the schema's declared order, ``string="true"`` raw strings,
``string="false"`` JSON values, at most :data:`MAX_JSON_WHITESPACE` whitespace characters in a row,
or ``--constrained-json-max-whitespace-cnt``, as for every JSON grammar).

The structural tags themselves (and the whitespace bound and error cleaning shared with them) are
built in :mod:`sglang_v4.sampling.structural_tag`; this module re-exports them.

``xgrammar`` is a dependency; should it fail to import, :func:`grammar_available` is False and
:meth:`GrammarBackend` raises ``ValueError`` ("not supported").
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from sglang_v4.sampling.json_schema_finite import check_schema_has_finite_value
from sglang_v4.sampling.json_schema_one_of import check_one_of_disjoint
from sglang_v4.sampling.json_schema_rewrite import (
    MAX_SCHEMA_DEPTH,
    check_json_schema,
    check_schema_depth,
    normalize_json_schema,
    open_arrays,
)
from sglang_v4.sampling.json_schema_structured_values import enum_values_as_schemas
from sglang_v4.sampling.json_schema_support import check_enforceable_schema, merge_all_of
from sglang_v4.sampling.regex_dialect import translate_regex
from sglang_v4.sampling.sampling_params import SamplingParams, check_structural_tag
from sglang_v4.sampling.structural_tag import (
    EMPTY_PARAMETERS,
    MAX_JSON_WHITESPACE,
    after_reasoning_structural_tag,
    answer_or_tool_calls_structural_tag,
    check_max_whitespace_cnt,
    clean_grammar_error,
    normalize_tag_schemas,
    structural_tag_object,
    tool_call_structural_tag,
)

if TYPE_CHECKING:
    from sglang_v4.managers.io_struct import FinishReason

__all__ = [
    "EMPTY_PARAMETERS",
    "MAX_JSON_WHITESPACE",
    "Grammar",
    "after_reasoning_structural_tag",
    "answer_or_tool_calls_structural_tag",
    "structural_tag_object",
    "GrammarBackend",
    "apply_grammar_masks",
    "check_max_whitespace_cnt",
    "normalize_json_schema",
    "open_arrays",
    "check_structural_tag",
    "clean_grammar_error",
    "grammar_available",
    "tool_call_structural_tag",
]

GRAMMAR_KINDS = ("json_schema", "regex", "ebnf", "structural_tag")


def grammar_available() -> bool:
    """True when the ``xgrammar`` package can be imported."""
    try:
        import xgrammar  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "unavailable"
        return False
    return True


class Grammar:
    """One request's grammar state (wraps ``xgrammar.GrammarMatcher``).

    Attributes:
        kind: ``"json_schema"``, ``"regex"``, ``"ebnf"`` or ``"structural_tag"``.
        vocab_size: bitmask width in tokens (the model's vocabulary size).
        prefix: text read before the first token (``SamplingParams.grammar_prefix``; ``""``).

    ``stop_token_ids`` (the constructor's), when given, replace the compiled grammar's stop
    tokens (the backend's EOS ids): the tokens that may end the grammar, masked until the text
    so far is a complete match of it (xgrammar's ``override_stop_tokens``).
    """

    def __init__(
        self,
        compiled: Any,
        kind: str,
        vocab_size: int,
        prefix: str = "",
        stop_token_ids: Sequence[int] | None = None,
    ) -> None:
        import xgrammar as xgr

        self._compiled = compiled
        self.kind = kind
        self.vocab_size = vocab_size
        self.prefix = prefix
        self._stop_token_ids = None if stop_token_ids is None else [int(t) for t in stop_token_ids]
        self.matcher = xgr.GrammarMatcher(compiled, override_stop_tokens=self._stop_token_ids)
        self.finished_tokens = 0
        self._read_prefix()

    def _read_prefix(self) -> None:
        """Advance the matcher over :attr:`prefix` (text already in the prompt that the output
        continues: ``SamplingParams.grammar_prefix``).

        Raises:
            ValueError: the grammar does not accept the prefix.
        """
        if self.prefix and not self.matcher.accept_string(self.prefix):
            shown = self.prefix if len(self.prefix) <= 60 else self.prefix[:57] + "..."
            raise ValueError(f"{self.kind}: the continued text {shown!r} does not match the grammar")

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed-next-token mask into ``bitmask[row]`` (``int32 [B, ceil(V/32)]``, CPU)."""
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def accept(self, token_id: int) -> bool:
        """Advance by one sampled token. Returns False if the grammar rejects it (state unchanged)."""
        ok = bool(self.matcher.accept_token(int(token_id)))
        if ok:
            self.finished_tokens += 1
        return ok

    def is_terminated(self) -> bool:
        """True once a stop token was accepted at a point where the grammar may end."""
        return bool(self.matcher.is_terminated())

    def end_tokens(self) -> list[int]:
        """The stop tokens that may end the output now: the matcher's stop token ids once the text
        accepted so far is a complete match of the grammar (xgrammar's ``is_completed``), else
        ``[]`` (also once terminated)."""
        if self.is_terminated() or not self.matcher.is_completed():
            return []
        return [int(t) for t in self.matcher.stop_token_ids if 0 <= int(t) < self.vocab_size]

    def allowed_next_tokens(self) -> torch.Tensor:
        """The tokens that may come next: ``[vocab_size]`` bool (all False once terminated), read
        from the matcher's own next-token mask applied to a zero ``[1, vocab_size]`` float32 row
        (the entries left finite)."""
        import xgrammar as xgr

        if self.is_terminated():
            return torch.zeros(self.vocab_size, dtype=torch.bool)
        row = torch.zeros(1, self.vocab_size, dtype=torch.float32)
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        self.fill_bitmask(bitmask, 0)
        xgr.apply_token_bitmask_inplace(row, bitmask)
        return torch.isfinite(row[0])

    def allows(self, token_id: int) -> bool:
        """Whether ``token_id`` may come next (its bit in the matcher's next-token bitmask; False
        once terminated or outside ``[0, vocab_size)``). The state is unchanged."""
        import xgrammar as xgr

        t = int(token_id)
        if not 0 <= t < self.vocab_size or self.is_terminated():
            return False
        bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)
        self.fill_bitmask(bitmask, 0)
        return bool((int(bitmask[0, t // 32]) >> (t % 32)) & 1)

    def allows_any_token(self) -> bool:
        """Whether some token of the vocabulary may come next (False at a dead end: a grammar
        whose language is empty, such as the regex ``[^\\s\\S]``, or one with no continuation of
        the text accepted so far; :meth:`allowed_next_tokens`)."""
        return bool(self.allowed_next_tokens().any())

    def rejection_reason(
        self,
        token_id: int,
        allowed_token_ids: Sequence[int] | None = None,
        banned_token_ids: Sequence[int] = (),
    ) -> FinishReason:
        """The finish reason of a request whose sampled ``token_id`` this grammar rejected.

        SGLang aborts such a request (its scheduler's "Grammar accept_token failed", HTTP 500).
        When the sampler found every logit masked because of what the request asked for, the
        abort is a 400 naming the field that left nothing: the grammar field (:attr:`kind`) when
        the grammar allows no token at all here (its own dead end); ``allowed_token_ids`` (vLLM's
        allowlist) when none of the grammar's tokens is in it; ``bad_words_ids`` when the tokens
        its bad words ban at this step (``banned_token_ids``) cover what the grammar and the
        allowlist leave. Otherwise the 500 of an engine fault.

        Args:
            token_id: the sampled token the grammar rejected.
            allowed_token_ids: the request's allowlist (``SamplingParams.allowed_token_ids``), if any.
            banned_token_ids: the tokens the request's bad words banned at this step
                (:func:`~sglang_v4.sampling.token_masks.banned_next_tokens` of the output before
                ``token_id``).

        Returns:
            SGLang's ``FINISH_ABORT`` shape (:func:`~sglang_v4.managers.io_struct.finish_abort`).
        """
        from sglang_v4.managers.io_struct import finish_abort

        left = self.allowed_next_tokens()
        after = f"after the {self.finished_tokens} token(s) generated so far"
        if not bool(left.any()):
            return finish_abort(
                f"{self.kind}: the grammar allows no token {after}: no text matching it continues "
                "this output (does it match any text?).",
                400,
            )
        if allowed_token_ids:
            keep = torch.zeros_like(left)
            ids = torch.as_tensor(
                [t for t in allowed_token_ids if 0 <= t < self.vocab_size], dtype=torch.long
            )
            keep[ids] = True
            left &= keep
            if not bool(left.any()):
                return finish_abort(
                    f"allowed_token_ids: none of these tokens is one the request's {self.kind} grammar "
                    f"allows {after}: together they leave nothing to generate.",
                    400,
                )
        banned = [t for t in banned_token_ids if 0 <= t < self.vocab_size]
        if banned:
            left[torch.as_tensor(banned, dtype=torch.long)] = False
            if not bool(left.any()):
                return finish_abort(
                    f"bad_words_ids: the words banned here cover every token that the request's "
                    f"{self.kind} grammar{' and allowed_token_ids' if allowed_token_ids else ''} "
                    f"let through {after}: together they leave nothing to generate.",
                    400,
                )
        return finish_abort(f"Grammar accept_token failed: {self.kind} rejected token {int(token_id)}.", 500)

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""
        self.matcher.rollback(int(num_tokens))
        self.finished_tokens -= int(num_tokens)

    def reset(self) -> None:
        """Back to the start state, the prefix read (e.g. after the request was retracted)."""
        self.matcher.reset()
        self.finished_tokens = 0
        self._read_prefix()

    def fresh_copy(self) -> Grammar:
        """A new matcher over the same compiled grammar, at the start state (for ``n > 1``)."""
        return Grammar(self._compiled, self.kind, self.vocab_size, self.prefix, self._stop_token_ids)


@functools.lru_cache(maxsize=4)
def _tokenizer_info(path: str, mtime_ns: int, size: int, vocab_size: int, stop_ids: tuple[int, ...]) -> Any:
    """The ``xgrammar.TokenizerInfo`` of the ``tokenizer.json`` at ``path`` (one version of it:
    ``mtime_ns`` and ``size`` are part of this in-process cache's key), read from or stored in the
    disk cache of :mod:`sglang_v4.sampling.tokenizer_info_cache` (keyed by the file's bytes)."""
    if not grammar_available():
        raise ValueError("constrained decoding needs the `xgrammar` package (pip install xgrammar)")
    from sglang_v4.sampling.tokenizer_info_cache import load_tokenizer_info

    return load_tokenizer_info(path, vocab_size, stop_ids)


class GrammarBackend:
    """Compiles request grammars with xgrammar (an LRU cache of compiled grammars).

    Args:
        tokenizer: a Hugging Face (fast) tokenizer of the model, or the ``xgrammar.TokenizerInfo``
            made from one (:meth:`from_tokenizer_file`; ``stop_token_ids`` are then those it holds).
        vocab_size: the model's vocabulary size (logits width; may exceed the tokenizer's).
        stop_token_ids: token ids that may end a grammar (the EOS ids).
        max_threads: compiler threads.
        cache_size: compiled grammars kept.
        max_whitespace_cnt: longest whitespace run a ``json_schema`` grammar allows
            (``--constrained-json-max-whitespace-cnt``; :data:`MAX_JSON_WHITESPACE` by default).

    Raises:
        ValueError: ``xgrammar`` is not installed, or ``max_whitespace_cnt`` < 1.
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        stop_token_ids: Sequence[int],
        max_threads: int = 2,
        cache_size: int = 256,
        max_whitespace_cnt: int = MAX_JSON_WHITESPACE,
    ) -> None:
        self.max_whitespace_cnt = check_max_whitespace_cnt(max_whitespace_cnt)
        if not grammar_available():
            raise ValueError("constrained decoding needs the `xgrammar` package (pip install xgrammar)")
        import xgrammar as xgr

        self.vocab_size = int(vocab_size)
        if isinstance(tokenizer, xgr.TokenizerInfo):
            info = tokenizer
        else:
            info = xgr.TokenizerInfo.from_huggingface(
                tokenizer, vocab_size=self.vocab_size, stop_token_ids=[int(t) for t in stop_token_ids]
            )
        self._compiler = xgr.GrammarCompiler(info, max_threads=max_threads)
        self._stop_ids = [int(t) for t in info.stop_token_ids]
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def from_tokenizer_file(
        cls, tokenizer_json: str, vocab_size: int, stop_token_ids: Sequence[int], **kw: Any
    ) -> GrammarBackend:
        """A backend over the ``tokenizer.json`` file at ``tokenizer_json``; ``kw`` as for the
        constructor. The vocabulary scan (``xgrammar.TokenizerInfo``, 2-3 s for a 129k-token
        vocabulary on one CPU core) is made once per file version, vocabulary size and stop ids in
        a process, and shared by the backends built after it (it is read-only); across processes
        it is kept on disk (:mod:`sglang_v4.sampling.tokenizer_info_cache`).

        Raises:
            ValueError: as the constructor; ``OSError`` when the file cannot be read.
        """
        st = os.stat(tokenizer_json)
        info = _tokenizer_info(
            os.path.realpath(tokenizer_json),
            st.st_mtime_ns,
            st.st_size,
            int(vocab_size),
            tuple(int(t) for t in stop_token_ids),
        )
        return cls(info, vocab_size, stop_token_ids, **kw)

    def _compile(self, kind: str, spec: str) -> Any:
        key = (kind, spec)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        if kind == "regex":
            spec = translate_regex(spec, "regex")  # ValueError naming the construct
        try:
            if kind == "json_schema":
                try:
                    schema = json.loads(spec)  # a clear error for malformed JSON first
                except RecursionError:
                    raise ValueError(
                        f"the schema nests deeper than the {MAX_SCHEMA_DEPTH} subschema levels supported"
                    ) from None
                check_schema_depth(schema)
                check_json_schema(schema)
                schema = normalize_json_schema(merge_all_of(schema))
                check_enforceable_schema(schema)
                check_one_of_disjoint(schema)
                check_schema_has_finite_value(schema)
                schema = enum_values_as_schemas(schema)
                compiled = self._compiler.compile_json_schema(
                    json.dumps(schema), max_whitespace_cnt=self.max_whitespace_cnt
                )
            elif kind == "regex":
                compiled = self._compiler.compile_regex(spec)
            elif kind == "ebnf":
                compiled = self._compiler.compile_grammar(spec)
            elif kind == "structural_tag":
                compiled = self._compile_structural_tag(spec)
            else:
                raise ValueError(f"unknown grammar kind {kind!r}")
        except (RuntimeError, ValueError, TypeError) as e:
            raise ValueError(f"{kind}: invalid grammar: {clean_grammar_error(e)}") from None
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return compiled

    def _compile_structural_tag(self, spec: str) -> Any:
        tag = normalize_tag_schemas(structural_tag_object(spec), self.max_whitespace_cnt)
        return self._compiler.compile_structural_tag(json.dumps(tag))

    def _request_stops(self, params: SamplingParams) -> list[int] | None:
        """The stop tokens of a request's grammar: the backend's EOS ids and the request's own
        ``stop_token_ids``, or ``None`` (the compiled grammar's, the EOS ids) when it sets none.

        A request's stop token ends its output wherever it is sampled; where the grammar did not
        know it as one, it was an ordinary token (allowed wherever its text fits, e.g. a letter
        inside a JSON string), and the output stopped in the middle of the value. As a stop
        token of the grammar it is masked until the value is complete (vllm-project/vllm#42403).
        """
        extra = getattr(params, "stop_token_ids", None)
        if not extra:
            return None
        ids = set(self._stop_ids) | {int(t) for t in extra if 0 <= int(t) < self.vocab_size}
        return sorted(ids)

    def create(self, params: SamplingParams) -> Grammar | None:
        """The grammar state of a request, or ``None`` when it sets no grammar field; with a
        ``grammar_prefix``, the state after reading it.

        Raises:
            ValueError: the grammar does not compile, rejects the ``grammar_prefix``, or allows
                no first token (its language is empty, e.g. the regex ``[^\\s\\S]``; read from
                the matcher's mask, :meth:`Grammar.allows_any_token`); the message names the field.
        """
        for kind in GRAMMAR_KINDS:
            spec = getattr(params, kind)
            if spec is not None:
                prefix = getattr(params, "grammar_prefix", None) or ""
                grammar = Grammar(
                    self._compile(kind, spec), kind, self.vocab_size, prefix, self._request_stops(params)
                )
                if not grammar.allows_any_token():
                    after = " after the continued text" if prefix else ""
                    raise ValueError(f"{kind}: the grammar matches no text{after} (no token can come first)")
                return grammar
        return None


def apply_grammar_masks(logits: torch.Tensor, grammars: Sequence[Grammar | None]) -> None:
    """Set the logits of tokens the grammar forbids to ``-inf`` (in place).

    Args:
        logits: ``[B, V]`` float32 (CPU or CUDA), ``V`` = the backend's ``vocab_size``.
        grammars: ``B`` entries; ``None`` rows are left untouched, as are terminated grammars.

    Raises:
        ValueError: length mismatch, or a grammar built for another vocabulary width.
    """
    if len(grammars) != logits.shape[0]:
        raise ValueError(f"batch mismatch: logits has {logits.shape[0]} rows, grammars {len(grammars)}")
    rows = [i for i, g in enumerate(grammars) if g is not None and not g.is_terminated()]
    if not rows:
        return
    import xgrammar as xgr

    vocab = logits.shape[1]
    for i in rows:
        g = grammars[i]
        assert g is not None
        if g.vocab_size != vocab:
            raise ValueError(f"grammar vocab_size {g.vocab_size} != logits width {vocab}")
    bitmask = xgr.allocate_token_bitmask(logits.shape[0], vocab)
    for i in rows:
        grammars[i].fill_bitmask(bitmask, i)  # type: ignore[union-attr]
    xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True), indices=rows)
