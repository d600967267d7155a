"""The answer of a request whose tools were withheld (``tool_choice: "none"``): DSML markup cut off.

With ``tool_choice: "none"`` the tools are not shown to the model (:mod:`.chat_prepare`), yet a
DeepSeek-V4 model that saw tool calls in the conversation may still write a DSML block
(``<｜DSML｜tool_calls>`` ..., sgl-project/sglang#35736). Such a block cannot be a call (the client
asked for none) and its markup must not reach ``content``: the official DeepSeek API answers such a
request with neither. :class:`DsmlWithheld` reads the answer in place of the tool-call parser: the
text up to the first DSML tag (``<｜DSML｜`` or ``</｜DSML｜``) is the content, without the
whitespace in front of the tag (the format's ``"\\n\\n"`` separator); the tag and everything after
it (the block, anything the model wrote after it) is dropped. No call is ever made and the finish
reason is the engine's. A tail that may be the start of a tag (``"\\n\\n<"``, ``"<｜DS"``) is held
back until the next characters decide, and released at the end when none came (streamed and not
alike: the non-streamed reading feeds the whole text once). A tag start written with ASCII bars
(``<|DSML|``, ``</|DSML|``) cuts alike (:class:`~.dsml_grammar.DsmlBarNormalizer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_v4.entrypoints.chat_encoding import DSML
from sglang_v4.entrypoints.openai.dsml_grammar import DsmlBarNormalizer, partial_suffix, trailing_ws
from sglang_v4.entrypoints.openai.tool_calls import ParsedToolCall, ToolCallDelta

__all__ = ["DsmlWithheld"]

#: What a DSML tag starts with; ``DSML`` (``"｜DSML｜"``) alone marks one too (the ``"<"`` is a
#: token of its own and the model may leave it out).
_TAG_STARTS = (f"<{DSML}", f"</{DSML}", DSML)


def _held_tail(text: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a DSML tag start,
    with the whitespace right before it."""
    n = max(partial_suffix(text, marker) for marker in _TAG_STARTS)
    return n + trailing_ws(text, len(text) - n)


@dataclass
class DsmlWithheld:
    """Streaming reader of an answer with the tools withheld (see the module docstring); the
    interface of :class:`~.tool_parser.DsmlToolParser` where the serving code uses it.

    Attributes:
        calls: always empty (no call can be made).
        cut: a DSML tag was met; everything from it on was dropped.
    """

    calls: list[ParsedToolCall] = field(default_factory=list)
    cut: bool = False
    _held: str = ""
    _bars: DsmlBarNormalizer = field(default_factory=DsmlBarNormalizer)  # ASCII-bar tags read as fullwidth

    @property
    def calls_whole(self) -> bool:
        """Always ``False``: the finish reason is never ``"tool_calls"``."""
        return False

    @property
    def calls_made(self) -> bool:
        """Always ``False``: no call is made."""
        return False

    @property
    def dropped_calls(self) -> set[int]:
        """Always empty: no call was started."""
        return set()

    @property
    def malformed(self) -> bool:
        """Always ``False``: no call was started, so none is taken back."""
        return False

    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        """Read the next generated text; returns ``(content_delta, [])``."""
        text = self._bars.feed(text)
        if self.cut:
            return "", []
        buf = self._held + text
        at = buf.find(DSML)
        if at >= 0:
            head = buf[:at]
            if head.endswith("</"):
                head = head[:-2]
            elif head.endswith("<"):
                head = head[:-1]
            self.cut, self._held = True, ""
            return head.rstrip(), []
        n = _held_tail(buf)
        self._held = buf[len(buf) - n :]
        return buf[: len(buf) - n], []

    def finish(self, stopped: bool = True) -> tuple[str, list[ToolCallDelta]]:
        """End of the generation: the held-back tail was text (``stopped`` is not used: nothing
        differs between a stop and the token limit here). Returns ``(content_delta, [])``."""
        del stopped
        out, self._held = ("" if self.cut else self._held + self._bars.finish()), ""
        return out, []
