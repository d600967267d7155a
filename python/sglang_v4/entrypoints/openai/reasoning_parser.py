"""Split DeepSeek thinking-mode output into ``reasoning_content`` and ``content``
(``--reasoning-parser``).

In V4 thinking mode the prompt ends with ``<think>``, so generation starts inside the reasoning
block and the first ``</think>`` ends it (SGLang's DeepSeek detectors behave the same way). A stray
leading ``<think>`` is dropped. Newlines are trimmed as DeepSeek's response parser
(``deepseek-recipe``) trims them: those at the start of the reasoning and right before
``</think>`` leave ``reasoning_content`` (jundot/omlx#3667: a reasoning that starts with the
model's newline shows an empty first line; a reasoning cut without ``</think>`` keeps its trailing
ones, nothing says they were its last, and one continuing a reasoning the prompt began keeps its
leading ones), and those right after ``</think>`` leave the content (a chat-mode answer's leading ones too: its
prompt ends with ``</think>``, :attr:`ReasoningSpec.answer_only`).
Other whitespace there (a space, a tab) is text, as DeepSeek's parser reads it: the next turn's
prompt renders ``reasoning + "</think>" + content``, which then repeats what the model wrote
(SGLang strips all whitespace after the tag, and the prompt loses it).
The streaming parser holds back a tail that could be the start of an end marker split across
chunks. The parsers, by SGLang's names (:data:`REASONING_PARSERS`):

* ``deepseek-v4`` (default): reasoning only in thinking mode (``chat_template_kwargs``
  ``{"thinking": true}``). When tools are offered, a DSML ``<｜DSML｜tool_calls>`` block also ends
  the reasoning (the model sometimes starts its calls without ``</think>``), as does an invoke
  written without its block (``<｜DSML｜invoke name=``, :data:`BARE_INVOKE_START`,
  sgl-project/sglang#32539: the text before it is the reasoning, whether the generation then stops
  or is cut); the block, with the
  newlines in front of it (the format's ``"\\n\\n"`` separator), stays in the content for the
  tool parser, and a ``</think>`` the model writes late, right after that block's end
  (``</｜DSML｜tool_calls>``, whitespace between), is dropped: it closes the reasoning the block
  already ended (seen from DeepSeek-V4-Flash: vLLM #45862, llama.cpp #25891). A generation that
  ends without ever writing ``</think>`` (stopped by EOS or a stop token, or cut by
  ``max_tokens``; stop strings match only after ``</think>``, :func:`stops_after_reasoning`) is
  reasoning throughout, as SGLang's and vLLM's DeepSeek detectors and DeepSeek's own response
  parsers (``deepseek-recipe``, chat and Messages) read it: a stream has sent that text as reasoning deltas before the finish says how
  the generation ended, and cannot take them back, so the non-streamed answer reads it the same
  way (a stream never carries the text twice, once as reasoning and again as content; the
  answer-in-``content`` reading asked for in vLLM #48645 would need exactly that).
  An output that ends while still reasoning with the first characters of an end marker (a
  partial ``</think>`` such as ``"</"``, or a partial block start such as
  ``"\\n\\n<｜DSML｜tool"``) ends with text of the reasoning: the streaming parser holds those
  characters back until the next ones decide, and at the end releases them as the rest of the
  reasoning, the same streamed and not. Why: V4's format has no tool-call block
  inside the reasoning (its tools instructions ask for the complete reasoning before any call,
  and DeepSeek's reference parser of completions rejects a block met before ``</think>`` as an
  invalid thinking format), so only a *complete* block start is taken as the end of the
  reasoning (the tolerated deviation), as only a complete ``</think>`` is; an unfinished one is
  not known to be markup (``"<"`` may be the reasoning's own text) and is not guessed away.
  A block or invoke start written with ASCII bars (``<|DSML|tool_calls>``,
  :class:`~.dsml_grammar.DsmlBarNormalizer`) ends the reasoning alike; the text read after the
  reasoning has every ASCII-bar tag start in the fullwidth spelling.
* ``deepseek-r1``: the output always starts inside reasoning (chat mode too), as DeepSeek-R1 did;
  without ``</think>`` everything is reasoning.
* ``deepseek-v3``: reasoning only in thinking mode; without ``</think>`` everything is reasoning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sglang_v4.entrypoints.chat_encoding import DSML, THINK_END, THINK_START
from sglang_v4.entrypoints.openai.dsml_grammar import DsmlBarNormalizer

__all__ = [
    "BARE_INVOKE_START",
    "REASONING_PARSERS",
    "REASONING_PARSER_NAMES",
    "ReasoningParser",
    "ReasoningSpec",
    "canonical_reasoning_parser",
    "reasoning_spec",
    "split_reasoning",
    "stops_after_reasoning",
]

#: ``--reasoning-parser`` names (SGLang's spelling).
REASONING_PARSERS = ("deepseek-v4", "deepseek-r1", "deepseek-v3")
#: The start of an invoke written without its block (``<｜DSML｜invoke name="f">`` with no
#: ``<｜DSML｜tool_calls>`` around it): like a block start, it ends the reasoning when tools are
#: offered (sgl-project/sglang#32539); the tool parser reads such a bare invoke as a block.
BARE_INVOKE_START = f"<{DSML}invoke name="
#: Other spellings; SGLang's ``auto`` picks the parser of the model's architecture, which is
#: DeepSeek-V4's for every model sglang-v4 serves.
_ALIASES = {
    "deepseek_v4": "deepseek-v4",
    "deepseekv4": "deepseek-v4",
    "deepseek_r1": "deepseek-r1",
    "deepseek-v41": "deepseek-v4",  # SGLang runs DeepSeek-V4's detector for it
    "auto": "deepseek-v4",
}
#: Every name :func:`canonical_reasoning_parser` accepts (the parsers and their other spellings).
REASONING_PARSER_NAMES = (*REASONING_PARSERS, *_ALIASES)


def canonical_reasoning_parser(name: str) -> str:
    """SGLang's spelling of a ``--reasoning-parser`` name (aliases such as vLLM's ``deepseek_v4``).

    Raises:
        ValueError: an unknown name (lists the choices).
    """
    key = _ALIASES.get(name, name)
    if key not in REASONING_PARSERS:
        raise ValueError(f"reasoning_parser must be one of {list(REASONING_PARSERS)} (got {name!r})")
    return key


@dataclass(frozen=True)
class ReasoningSpec:
    """How one request's output is split.

    Attributes:
        separate: the output starts inside a reasoning block (split it at all).
        implicit_end: markers that end the reasoning without ``</think>`` (kept in the content).
        continued: the output continues a reasoning the prompt already began (prefix completion
            of a turn holding only ``reasoning_content``): its leading newlines are its text.
        answer_only: the prompt ends with ``</think>`` (chat mode, not continuing a final turn):
            the output is the answer, and its leading newlines leave the content as they do
            right after a ``</think>`` the model writes (DeepSeek's response parser,
            ``deepseek-recipe``, reads a chat-mode answer so); see :meth:`ReasoningParser.answer`.
    """

    separate: bool
    implicit_end: tuple[str, ...] = ()
    continued: bool = False
    answer_only: bool = False


def reasoning_spec(parser: str, thinking: bool, tool_block_start: str | None = None) -> ReasoningSpec:
    """The :class:`ReasoningSpec` of ``parser`` for a request.

    Args:
        parser: a canonical name from :data:`REASONING_PARSERS`.
        thinking: the prompt was rendered in thinking mode (ends with ``<think>``).
        tool_block_start: the DSML block start marker when tools are offered, else ``None``.
    """
    if parser == "deepseek-r1":
        return ReasoningSpec(separate=True)
    if parser == "deepseek-v3":
        return ReasoningSpec(separate=thinking, answer_only=not thinking)
    implicit = (tool_block_start, BARE_INVOKE_START) if tool_block_start else ()
    return ReasoningSpec(separate=thinking, implicit_end=implicit, answer_only=not thinking)


def split_reasoning(
    text: str, implicit_end: tuple[str, ...] = (), continued: bool = False
) -> tuple[str | None, str]:
    """Non-streaming split of a full completion: the text a :class:`ReasoningParser` fed it in
    one piece and flushed returns, so a stream's deltas joined give the same split.

    Args:
        text: the generated text.
        implicit_end: see :class:`ReasoningSpec`.
        continued: see :class:`ReasoningSpec`.

    Returns:
        ``(reasoning_content, content)``; ``reasoning_content`` is ``None`` when empty. Without an
        end marker the whole text is reasoning and ``content`` is ``""``, however the generation
        ended (module docstring).
    """
    p = ReasoningParser(implicit_end=implicit_end, continued=continued)
    r1, c1 = p.feed(text)
    r2, c2 = p.flush()
    reasoning, content = r1 + r2, c1 + c2
    return (reasoning or None), content


@dataclass
class ReasoningParser:
    """Incremental parser; feed text deltas, get ``(reasoning_delta, content_delta)`` pairs.

    Attributes:
        stream_reasoning: when False, reasoning is held until it is complete and returned in one piece.
        in_reasoning: still inside the reasoning block (no end marker seen yet).
        implicit_end: markers that also end the reasoning; they stay at the start of the content.
            With them, ASCII-bar DSML tag starts are read as fullwidth ones (module docstring).
        continued: the output continues a reasoning the prompt began: its leading newlines are
            kept (:class:`ReasoningSpec`).
    """

    stream_reasoning: bool = True
    in_reasoning: bool = True
    implicit_end: tuple[str, ...] = ()
    continued: bool = False
    _buf: str = ""
    _held_reasoning: str = ""
    _started: bool = False
    _strip_content_ws: bool = False
    #: a reasoning character other than a newline has been returned (leading newlines are dropped)
    _reasoning_begun: bool = False
    #: a trailing run of newlines of the reasoning, held until the next character decides
    _held_newlines: str = ""
    #: after an implicit end: the end marker of that block (``</｜DSML｜tool_calls>``) while it is
    #: awaited, then ``""`` while a late ``</think>`` right after it may still come; None: neither
    _late_tag_after: str | None = None
    _bars: DsmlBarNormalizer = field(default_factory=DsmlBarNormalizer)  # with implicit_end only

    @classmethod
    def answer(cls) -> ReasoningParser:
        """A parser of an output that starts after ``</think>`` (a chat-mode prompt ends with
        it, :attr:`ReasoningSpec.answer_only`): every piece is content, its leading newlines
        dropped as after a ``</think>`` the model writes."""
        return cls(in_reasoning=False, _started=True, _strip_content_ws=True)

    def feed(self, delta: str) -> tuple[str, str]:
        """Consume a text delta.

        Returns:
            ``(reasoning_delta, content_delta)`` (either may be ``""``).
        """
        self._buf += self._bars.feed(delta) if self.implicit_end else delta
        reasoning, content = "", ""
        if not self._started:
            # Drop an optional leading "<think>" (wait until we know whether it is there).
            stripped = self._buf.lstrip()
            if THINK_START.startswith(stripped) and len(stripped) < len(THINK_START):
                return "", ""
            if stripped.startswith(THINK_START):
                self._buf = stripped[len(THINK_START) :]
            self._started = True
        if self.in_reasoning:
            pos, marker = self._find_end()
            if pos >= 0:
                reasoning = self._buf[:pos]
                if marker == THINK_END:
                    self._buf = self._buf[pos + len(THINK_END) :]
                    self._strip_content_ws = True
                else:  # a block start: its separating newlines go with it to the content
                    ws = len(reasoning) - len(reasoning.rstrip("\n"))
                    reasoning, self._buf = reasoning[: len(reasoning) - ws], self._buf[pos - ws :]
                    # the closing tag of the block (or bare invoke) the marker opens
                    self._late_tag_after = "</" + marker[1:].split(" ")[0].rstrip(">") + ">"
                self.in_reasoning = False
            else:
                keep = max(_partial_suffix_len(self._buf, m) for m in (THINK_END, *self.implicit_end))
                if self.implicit_end:  # whitespace that may separate a block start: held too
                    head = self._buf[: len(self._buf) - keep]
                    keep += len(head) - len(head.rstrip())
                reasoning = self._buf[: len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep :]
            reasoning = self._trim_reasoning(reasoning, ended=not self.in_reasoning)
            if not self.stream_reasoning:
                self._held_reasoning += reasoning
                reasoning = ""
                if not self.in_reasoning:
                    reasoning, self._held_reasoning = self._held_reasoning, ""
        if not self.in_reasoning:
            content = self._late_tag_content() if self._late_tag_after is not None else self._buf
            self._buf = self._buf if self._late_tag_after is not None else ""
            if self._strip_content_ws:
                content = content.lstrip("\n")
                if content:
                    self._strip_content_ws = False
        return reasoning, content

    def _trim_reasoning(self, reasoning: str, ended: bool) -> str:
        """``reasoning`` (the next piece of the reasoning text) without the reasoning's leading
        newlines, and without its trailing ones once it has ``ended`` (module docstring); a
        trailing run of newlines of an unended reasoning is held until the next piece."""
        text, self._held_newlines = self._held_newlines + reasoning, ""
        if not (self._reasoning_begun or self.continued):
            text = text.lstrip("\n")
            self._reasoning_begun = bool(text)
        body = text.rstrip("\n")
        if not ended:
            self._held_newlines = text[len(body) :]
        return body

    def _late_tag_content(self) -> str:
        """Content of the buffer after an implicit end, without a late ``</think>`` right after the
        block's end (module docstring); what may still become one stays in the buffer."""
        end = self._late_tag_after
        assert end is not None
        out = ""
        if end:
            pos = self._buf.find(end)
            if pos < 0:
                keep = _partial_suffix_len(self._buf, end)
                out, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
                return out
            out, self._buf = self._buf[: pos + len(end)], self._buf[pos + len(end) :]
            self._late_tag_after = end = ""
        rest = self._buf.lstrip()
        if rest.startswith(THINK_END):
            out += rest[len(THINK_END) :]
        elif THINK_END.startswith(rest):
            return out  # only whitespace or the first characters of the tag so far
        else:
            out += self._buf
        self._buf, self._late_tag_after = "", None
        return out

    def _find_end(self) -> tuple[int, str]:
        """Position and marker of the earliest end marker in the buffer (``-1`` if none)."""
        best, which = -1, ""
        for m in (THINK_END, *self.implicit_end):
            p = self._buf.find(m)
            if p >= 0 and (best < 0 or p < best):
                best, which = p, m
        return best, which

    def flush(self) -> tuple[str, str]:
        """End of stream: return whatever is still held back as ``(reasoning, content)``; inside
        the reasoning, the first characters of an end marker held back are reasoning text (module
        docstring)."""
        rest, self._buf = self._buf + self._bars.finish(), ""
        if not self._started:  # whitespace only, or the first characters of ``<think>``
            stripped = rest.lstrip()
            if stripped.startswith(THINK_START):
                rest = stripped[len(THINK_START) :]
            self._started = True
        if self.in_reasoning:  # cut without an end: trailing newlines are the reasoning's text
            out = self._held_reasoning + self._trim_reasoning(rest, ended=False) + self._held_newlines
            self._held_reasoning = self._held_newlines = ""
            return out, ""
        return "", rest.lstrip("\n") if self._strip_content_ws else rest


def _partial_suffix_len(text: str, token: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``token``."""
    for n in range(min(len(text), len(token) - 1), 0, -1):
        if token.startswith(text[-n:]):
            return n
    return 0


def stops_after_reasoning(sp: dict[str, Any], think_end_id: int) -> bool:
    """Make ``sp``'s stop strings apply to the answer only (in place).

    Args:
        sp: SGLang sampling parameters of a request whose output starts inside reasoning.
        think_end_id: the ``</think>`` token id.

    Returns:
        Whether ``stop`` held ``"</think>"``: it is moved to ``stop_token_ids`` (the tag is one
        token, so ``no_stop_trim`` keeps or drops the same text either way). With other stop
        strings or ``stop_regex``, ``stop_str_after_token_id`` is set to ``think_end_id``.
    """
    stop = sp.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    marker = THINK_END in stops
    if marker:
        stops = [x for x in stops if x != THINK_END]
        sp["stop_token_ids"] = sorted({*(sp.get("stop_token_ids") or ()), think_end_id})
        if stops:
            sp["stop"] = stops
        else:
            sp.pop("stop", None)
    if stops or sp.get("stop_regex"):
        sp["stop_str_after_token_id"] = think_end_id
    return marker
