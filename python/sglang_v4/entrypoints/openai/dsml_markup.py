"""DSML markup scrubbing: no DSML tag ever reaches ``content`` or ``reasoning_content``.

DeepSeek-V4 writes DSML markup the tool-call parser (:mod:`.tool_parser`) cannot make a call of:
closing tags left over after a complete block (``...</｜DSML｜tool_calls>\\n</｜DSML｜invoke>``,
vllm-project/vllm#51914), closers with no opener at all (``text\\n\\n</｜DSML｜parameter>\\n
</｜DSML｜invoke>``, the "closer shells" of long agent sessions), a wrapper of another name before
plain text, the ``｜DSML｜`` token without the ``"<"`` token in front of it, DSML written while
reasoning (vllm-project/vllm#54686). Whatever the parser leaves in the answer, and whatever is in
the reasoning, goes through :class:`DsmlMarkupScrub`, which drops every DSML tag and keeps the
rest of the text:

* a DSML tag is the ``｜DSML｜`` token, with the ``"<"`` or ``"</"`` right before it if there, its
  name (word characters) and ``name="value"`` attributes, up to and including its ``">"`` if
  written (:data:`DSML_TAG`); what follows that is text;
* a dropped tag takes the whitespace right before it with it, and the whitespace right after it
  when nothing but whitespace and tags follows to the end of the output (so
  ``"Done.\\n</｜DSML｜tool_calls>\\n"`` reads ``"Done."``, ``"a </｜DSML｜x> b"`` reads ``"a b"``);
* a tail that may still become a tag (``"<"``, ``"</｜DS"``, ``"<｜DSML｜invoke name=\\"f"``) or
  whitespace that may be followed by one is held back until the next characters decide, and
  released at the end (a tag unfinished at the end is dropped; the first characters of the
  ``｜DSML｜`` token alone, such as ``"<｜DS"``, are text). Streamed and not alike: the
  non-streamed reading feeds the whole text once (:func:`scrub_dsml`);
* a tag written with ASCII bars (``</|DSML|invoke>``) is a tag too: the text is read through
  :class:`~.dsml_grammar.DsmlBarNormalizer` first (``|DSML|`` not right after ``"<"`` or
  ``"</"`` is text, unlike the one-token ``｜DSML｜``).

:class:`DsmlAnswerReader` is the answer reader every route uses (chat completions, Responses,
Anthropic Messages; :meth:`~.chat_prepare.ChatPlan.tool_reader`): the tool-call parser, or the
cutter of :mod:`.dsml_withheld` under ``tool_choice: "none"``, with its content scrubbed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sglang_v4.entrypoints.chat_encoding import DSML
from sglang_v4.entrypoints.openai.dsml_grammar import MAX_TAG_CHARS, DsmlBarNormalizer
from sglang_v4.entrypoints.openai.dsml_withheld import DsmlWithheld
from sglang_v4.entrypoints.openai.tool_calls import ParsedToolCall, ToolCallDelta
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser

__all__ = ["DSML_TAG", "DsmlAnswerReader", "DsmlMarkupScrub", "scrub_dsml"]

#: A DSML tag, finished (``>``) or not (module docstring).
DSML_TAG = re.compile(rf'(?:</?)?{DSML}\w*(?:(?:\s+[\w-]+="[^"<>\n]*")*\s*/?>)?')
#: What a tag that is still being written may look like at the end of the text.
_GROWING_TAG = re.compile(rf'(?:</?)?{DSML}\w*(?:\s+[\w-]+(?:="[^"<>\n]*"?|=)?)*\s*/?\Z')


def _may_become_tag(tail: str) -> bool:
    """Whether ``tail`` (from a ``"<"`` or ``"｜"`` to the end of the text) may be the first
    characters of a DSML tag, or a tag whose ``">"`` may still come."""
    head = tail[2:] if tail.startswith("</") else tail[1:] if tail.startswith("<") else tail
    if len(head) < len(DSML):
        return DSML.startswith(head)
    return len(tail) <= MAX_TAG_CHARS and _GROWING_TAG.match(tail) is not None


def _growing_tag_start(text: str) -> int:
    """Where a tag that may still grow starts at the end of ``text`` (``len(text)``: none)."""
    for i in range(max(0, len(text) - MAX_TAG_CHARS - 2), len(text)):
        if text[i] in "<｜" and _may_become_tag(text[i:]):
            return i
    return len(text)


@dataclass
class DsmlMarkupScrub:
    """Streaming remover of DSML tags from a text (module docstring).

    Attributes:
        dropped: at least one tag was dropped.
    """

    dropped: bool = False
    _buf: str = ""
    _after_tag: bool = False  # the last thing read was a dropped tag (whitespace after it held)
    _bars: DsmlBarNormalizer = field(default_factory=DsmlBarNormalizer)  # ASCII-bar tags read as fullwidth

    def feed(self, text: str) -> str:
        """Read the next text; returns the part of the scrubbed text that is decided."""
        buf = self._buf + self._bars.feed(text)
        hold = _growing_tag_start(buf)
        out = self._scrub(buf[:hold])
        # whitespace at the end may precede a tag (it goes with it): held with the tail
        ws = len(out) - len(out.rstrip())
        self._buf = out[len(out) - ws :] + buf[hold:]
        return out[: len(out) - ws]

    def release_whitespace(self) -> str:
        """The whitespace held back at the end of the text read so far (``""`` when the tail held
        is more than whitespace, or follows a dropped tag): the caller knows no tag follows it,
        since a tool-call block starts there and the parser read the block's markup."""
        if not self._buf or self._buf.strip() or self._after_tag:
            return ""
        out, self._buf = self._buf, ""
        return out

    def finish(self) -> str:
        """End of the text: what was held back (an unfinished tag dropped)."""
        rest, self._buf = self._buf + self._bars.finish(), ""
        hold = _growing_tag_start(rest)
        if DSML not in rest[hold:]:  # only the first characters of the token: text
            hold = len(rest)
        out = self._scrub(rest[:hold])
        if hold < len(rest):  # a tag unfinished at the end
            out, self._after_tag, self.dropped = out.rstrip(), True, True
        if self._after_tag and not out.strip():
            return ""
        return out

    def _scrub(self, text: str) -> str:
        pieces: list[str] = []
        pos = 0
        for m in DSML_TAG.finditer(text):
            pieces.append(text[pos : m.start()].rstrip())
            pos = m.end()
            self._after_tag = self.dropped = True
        tail = text[pos:]
        if tail.strip():
            self._after_tag = False
        pieces.append(tail)
        return "".join(pieces)


def scrub_dsml(text: str) -> str:
    """``text`` without DSML tags (the whole text read by a :class:`DsmlMarkupScrub`)."""
    s = DsmlMarkupScrub()
    return s.feed(text) + s.finish()


@dataclass
class DsmlAnswerReader:
    """Reader of one choice's answer: ``inner`` (the tool-call parser, or :class:`DsmlWithheld`
    when the tools were withheld) with its content scrubbed of DSML tags (module docstring). The
    interface of :class:`~.tool_parser.DsmlToolParser` where the serving code uses it.

    ``max_calls`` (``parallel_tool_calls: false``: 1): the answer makes at most that many calls,
    the first ones written; the model's further invokes are read (their markup never reaches
    ``content``) but make no call and stream no delta (OpenAI's contract for the flag, which the
    tool-call grammar enforces while decoding where one applies; sgl-project/sglang#9696). The
    finish reason of such an answer is the one of its kept calls.

    ``calls_forced`` (``tool_choice`` ``"required"`` / named, under the tool-call grammar): the
    answer is the separator and a block; newlines held back in front of a block that never came
    (a reply cut by ``max_tokens`` before it) are dropped at the finish, not sent as content
    (vLLM's ``test_max_tokens_with_tool_choice_required``: ``content`` empty, no calls).
    """

    inner: DsmlToolParser | DsmlWithheld
    scrub: DsmlMarkupScrub = field(default_factory=DsmlMarkupScrub)
    max_calls: int | None = None
    calls_forced: bool = False

    @property
    def calls(self) -> list[ParsedToolCall]:
        """The calls of the inner reader (the first ``max_calls`` of them)."""
        calls = self.inner.calls
        return calls if self.max_calls is None else calls[: self.max_calls]

    @property
    def calls_whole(self) -> bool:
        """:attr:`calls_made`, and no dropped call of those kept went out as deltas (the
        stream's test, :attr:`~.tool_parser.DsmlToolParser.calls_whole`)."""
        return self.calls_made and not self.dropped_calls

    @property
    def calls_made(self) -> bool:
        """The inner reader's :attr:`~.tool_parser.DsmlToolParser.calls_made`; with
        ``max_calls``, whether the kept calls were all made and none was cut."""
        if self.max_calls is None or len(self.inner.calls) <= self.max_calls:
            return self.inner.calls_made
        return not any(c.partial for c in self.calls)

    @property
    def dropped_calls(self) -> set[int]:
        """The inner reader's :attr:`~.tool_parser.DsmlToolParser.dropped_calls` (those below
        ``max_calls``: the others never went out)."""
        dropped = self.inner.dropped_calls
        return dropped if self.max_calls is None else {i for i in dropped if i < self.max_calls}

    @property
    def malformed(self) -> bool:
        """The inner reader's :attr:`~.tool_parser.DsmlToolParser.malformed`."""
        return self.inner.malformed

    def _kept(self, deltas: list[ToolCallDelta]) -> list[ToolCallDelta]:
        return deltas if self.max_calls is None else [d for d in deltas if d.index < self.max_calls]

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        """Read the next generated text; returns ``(content_delta, tool_call_deltas)``."""
        content, deltas = self.inner.feed(text)
        out = self.scrub.feed(content)
        if deltas:  # a call began: the whitespace held before its block was text written before it
            out += self.scrub.release_whitespace()
        return out, self._kept(deltas)

    def finish(self, stopped: bool = False) -> tuple[str, list[ToolCallDelta]]:
        """End of the generation (``stopped``: see :meth:`~.tool_parser.DsmlToolParser.finish`)."""
        content, deltas = self.inner.finish(stopped)
        if self.calls_forced and not content.strip("\n"):
            content = ""  # the grammar's separator in front of the block (class docstring)
        return self.scrub.feed(content) + self.scrub.finish(), self._kept(deltas)
