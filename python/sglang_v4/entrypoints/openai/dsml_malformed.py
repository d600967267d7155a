"""Malformed DSML tool calls: the part of the streaming parser
(:class:`~.tool_parser.DsmlToolParser`, module docstring of :mod:`.tool_parser`) that drops a
malformed invoke or block and skips its text, never returning DSML markup as content.

A fault inside an invoke of a wrapped block drops that invoke alone, up to its
``</｜DSML｜invoke>`` (or the block's closing tag, whichever comes first), and the block goes on,
as SGLang's and vLLM's DeepSeek-V4 parsers keep a malformed invoke's siblings. Any other fault
drops the block from its first character, or from the end of its last closed invoke (those stay
calls), up to its end: its wrapper's closing tag, for a bare block the failing invoke's closing
tag. A dropped call whose deltas went out already is recorded in
:attr:`~.tool_parser.DsmlToolParser.dropped_calls`. A bare block's first invoke that goes on as
prose opened no block at all: its text is content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_BLOCK as _BLOCK,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_RAW as _RAW,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_TEXT as _TEXT,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    partial_suffix as _partial_suffix,
)

if TYPE_CHECKING:
    from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser

__all__ = ["DsmlMalformedMixin"]


class DsmlMalformedMixin:
    """The malformed-markup half of :class:`~.tool_parser.DsmlToolParser` (module docstring);
    its state (the open block and call, the skip flags, :attr:`malformed`, :attr:`dropped_calls`)
    is the parser's."""

    def _drop_block(self: DsmlToolParser) -> None:
        """Malformed: the open block is dropped from here to its end (module docstring); the
        invokes that closed before stay calls."""
        self._forget_call()
        self._state = _RAW
        self.calls.extend(self._block_calls)
        self._raw = ""
        self._block_calls = []

    def _drop_invoke(self: DsmlToolParser, ended: bool = False) -> None:
        """Malformed invoke of a wrapped block: dropped up to its closing tag (``ended``: read
        already), the block goes on (module docstring). In a bare block: :meth:`_drop_block`."""
        if self._bare:
            self._drop_block()
            return
        self._forget_call()
        self._state, self._skip_invoke = (_BLOCK, False) if ended else (_RAW, True)

    def _forget_call(self: DsmlToolParser) -> None:
        """Mark the output malformed and drop the open call (recorded in
        :attr:`dropped_calls` when its deltas went out)."""
        self.malformed = True
        if self._call is not None and not self._withheld:
            self.dropped_calls.add(self._call.index)
        self._call = None
        self._held_ws = ""
        self._hold = self._hold_undecided = self._withheld = False

    def _unopen_bare(self: DsmlToolParser, content: list[str]) -> None:
        """A bare block's first invoke goes on as prose (text where its first parameter, JSON body
        or closing tag belongs, or a malformed invoke tag): no block was opened; its text is
        content (the tag itself is dropped there by :mod:`.dsml_markup`), nothing of it went out
        as a call (module docstring)."""
        content.append(self._raw)
        if self._call is not None:
            self._n_calls -= 1
        self._raw, self._call, self._state, self._bare = "", None, _TEXT, False
        self._hold = self._hold_undecided = self._withheld = False
        self._cur_end = self.block_end

    def _skip_to_invoke_end(self: DsmlToolParser) -> bool:
        """Drop text up to the malformed invoke's closing tag (then the block goes on) or the
        block's own closing tag, whichever comes first; False when more text is needed."""
        ends = [(p, m) for m in (self.invoke_end, self._cur_end) if (p := self._buf.find(m)) >= 0]
        if not ends:
            keep = max(_partial_suffix(self._buf, self.invoke_end), _partial_suffix(self._buf, self._cur_end))
            self._buf = self._buf[len(self._buf) - keep :]
            return False
        pos, end = min(ends)
        self._buf = self._buf[pos + len(end) :]
        self._skip_invoke = False
        if end == self.invoke_end:
            self._state = _BLOCK
            return True
        self.calls.extend(self._block_calls)
        self._block_calls, self._raw = [], ""
        self._state, self._after_block = _TEXT, True
        return True

    def _skip_to_block_end(self: DsmlToolParser) -> bool:
        """Drop text up to the malformed block's end (a bare block's: the failing invoke's
        closing tag), then text follows; False when more text is needed."""
        end = self.invoke_end if self._bare else self._cur_end
        pos = self._buf.find(end)
        if pos < 0:
            self._buf = self._buf[len(self._buf) - _partial_suffix(self._buf, end) :]
            return False
        self._buf = self._buf[pos + len(end) :]
        self._state, self._after_block = _TEXT, True
        return True
