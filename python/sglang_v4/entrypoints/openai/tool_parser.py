"""Incremental parser of DeepSeek DSML tool calls (``--tool-call-parser deepseekv4``).

The model writes tool calls as one DSML block at the end of its answer (format of DeepSeek's
``encoding_dsv4.py``, see :mod:`sglang_v4.entrypoints.chat_encoding`)::

    optional text\\n\\n<｜DSML｜tool_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜tool_calls>

:class:`DsmlToolParser` is fed the text as it is generated and returns ``(content_delta,
[ToolCallDelta])`` in OpenAI's streaming shape: the first delta of a call carries its ``id`` and
``name`` (as soon as the invoke tag is complete), later deltas carry fragments of
``function.arguments``, a JSON object built while the values arrive: ``{"city": "Paris", "days":
3}``. A ``string="true"`` value is streamed as the JSON-escaped string (but for a parameter whose
schema allows no string: held to its end, then the JSON value it spells, :mod:`.tool_args_repair`,
vllm-project/vllm#30797), a ``string="false"`` value
as its raw JSON text without surrounding whitespace (checked with ``json.loads`` when it ends); the
separators are those of the reference decoder (``", "`` and ``": "``). An invoke whose body is a
JSON object instead of parameters (``<｜DSML｜invoke name="f">{"city": "Paris"}</｜DSML｜invoke>``)
is accepted too, and so is a self-closing invoke tag (``<｜DSML｜invoke name="f"/>``: a call of
``f`` with the arguments ``{}``, as SGLang's DeepSeek-V4 detector reads it).

Nothing of the DSML markup ever reaches ``content`` or ``arguments``: text that may be the start
of a marker (``"<"``, ``"</｜DSML｜param"`` ...) and whitespace in front of the block are held back
until the next characters decide. The newlines right before a block are its separator (the
format's ``"\n\n"``) and are dropped with it; any other whitespace there (``"Done. \n\n<｜DSML｜..."``)
is content, as DeepSeek's response parser (``deepseek-recipe``) reads it, so that the next turn's
prompt, which renders ``content + "\n\n" + block``, repeats what the model wrote. Whitespace right
after a block is held too: dropped when the output ends there or nothing (or whitespace) came
before the block, else kept as the separator of the text that follows it (``"Hi." block
" More."`` -> ``"Hi. More."``, not two sentences run together; vllm-project/vllm#56184).

A block still open at the end is *cut* when ``max_tokens`` ended the generation
(:meth:`DsmlToolParser.finish` without ``stopped``), answered as OpenAI answers a function call cut
by the token limit: the calls whose invoke tag was complete are calls, the last one with the
arguments generated so far (a prefix of the JSON text, usually not JSON; a held-back start of a
closing tag dropped), nothing of the block in ``content``; an invoke cut before its name was
complete is no call. A generation that *stopped* (EOS, a stop token, a ``stop`` string:
``finish(stopped=True)``) inside an invoke, or in a block before its first invoke closed, did not
make that call: the block is malformed (below, dropped) from there (vllm-project/vllm#42210); stopped after
its last closed invoke, it made its calls (:attr:`DsmlToolParser.calls_made`: finish reason
``"tool_calls"``, sgl-project/sglang#40236). Output cut by ``max_tokens`` that ends with the first
characters of a block start (``"\n\n<"``, ``"<｜DSML｜tool"`` ...) drops them with the newlines
before them (in the content only; at the end of unfinished reasoning they are reasoning text,
:mod:`.reasoning_parser`); output that *stopped* there opened no block, so they are text (a
literal ``"<"``, ``"a <"``), as DeepSeek's response parser (``deepseek-recipe``) reads them, but
from the ``<｜DSML｜`` marker on, which is never content.
The streamed deltas and :func:`parse_tool_calls` give the same calls;
:attr:`DsmlToolParser.truncated` is set, :attr:`DsmlToolParser.complete` False.

A *bare* block, invokes without the ``<｜DSML｜tool_calls>`` wrapper (DeepSeek-V4 leaves the
wrapper out at times, at long contexts especially: sgl-project/sglang#40236, vllm-project/vllm#48931),
is a block too: it starts at ``<｜DSML｜invoke`` and ends after its last invoke, at the wrapper's
closing tag if the model writes it (the orphan end of vLLM's report, dropped) or at the first text
that is not another invoke (that text is content); ended by the end of the output after a closed
invoke, it is complete. Only an invoke of one of the request's tools that is written out whole
makes a call of it (an unknown name is a malformed block, as in a wrapped one). Streamed, a bare
block's call goes out as a wrapped one's does (its ``id`` and ``name`` first, then its arguments
while they are generated) once its first invoke is confirmed by its structure: the first
parameter tag, JSON body (its ``{`` and then ``"`` or ``}``) or closing tag after the invoke
tag. Until then nothing of it goes out,
so prose that merely mentions an invoke tag is no call in the stream either
(vllm-project/vllm#48931 on vllm-project/vllm#49117's recovery); the later invokes of a bare block
stream from their tag. Cut by ``max_tokens`` before that confirmation, the call goes out at the
end as the cut call. A bare block whose first invoke goes on as
prose (text where its first parameter, JSON body or closing tag belongs, a ``{`` not followed
by a key or ``}`` included, or a malformed invoke tag) opened no block: its text is content, the tag dropped there (:mod:`.dsml_markup`). A DSML
wrapper of another name whose first content is an invoke is a block too, closed by its own closing tag
(DeepSeek-V4-Flash-0731 writes ``<｜DSML｜toolcalls>`` at times, vllm-project/vllm#51914; V3.2
wrote ``function_calls``): the invoke grammar is the same; before other text such a tag is text.

With the tools' schemas (``tool_names`` a mapping name -> ``parameters``), a call whose only
parameter is a spurious ``arguments`` / ``input`` wrapper is repaired
(:mod:`.tool_args_repair`): its arguments are held back from the stream from the wrapper's tag
(or, for a JSON body, from its first key) until the invoke ends, then sent whole, repaired; a
second parameter releases them.

A block that is malformed (unknown tool, bad tag, invalid JSON value (but a ``string="false"`` value
of a parameter whose schema allows a string: that string, :mod:`.tool_args_repair`), duplicate parameter (or JSON key), text
between tags, the invoke's own markup inside a value: a closing tag left out, the value would
swallow the next parameter's markup, vllm-project/vllm#53227; other DSML-looking text in a value,
such as a quoted ``<｜DSML｜tool_calls>``, is the value's text) is *dropped*, never returned as text (no DSML markup
in ``content``; the peers' fixes, vllm-project/vllm-ascend#14511, sgl-project/sglang#40236). When
the fault is inside an invoke of a wrapped block, only that invoke is dropped, up to its
``</｜DSML｜invoke>`` (or the block's closing tag, whichever comes first), and the block goes on:
the invokes before and after it are calls, as SGLang's and vLLM's DeepSeek-V4 parsers drop a
malformed invoke and keep its siblings. Any other fault drops the block from its first character
or, when invokes of the block closed before, from the end of the last of them (those stay calls)
up to the block's end: its wrapper's closing tag, for a bare block the end of the failing invoke
(``</｜DSML｜invoke>``); text after that is content again; with no such end the rest of the output
is dropped. The whole calls made beside a malformed invoke give the finish reason
``"tool_calls"`` (:attr:`DsmlToolParser.calls_made`). Streamed, the deltas of the failing (or
stopped) invoke's call, once its tag was complete (a bare block's first call: once its structure
confirmed it, above), went out already and are not taken back (vLLM leaves them too): the one
difference from :func:`parse_tool_calls`, which has no such call; the content is the same text;
such a stream's finish reason is not ``"tool_calls"`` (:attr:`DsmlToolParser.calls_whole`), its
call's index is in :attr:`DsmlToolParser.dropped_calls`. DSML tags left in the content (closers
with no block, tags of other names) are dropped by :mod:`.dsml_markup`. A ``</think>`` right
after a closed block (whitespace between) ends the thinking the block was written in and is no
content, as DeepSeek's response parser drops it (``deepseek-recipe``); text after it is content.

Tags written with ASCII bars (``<|DSML|invoke name="f">`` ... ``</|DSML|invoke>``, the legacy
spelling DeepSeek-V4 writes at times, cline/cline#13348) are read exactly as the fullwidth ones:
the text is read through :class:`~.dsml_grammar.DsmlBarNormalizer`, which rewrites every
``<|DSML|`` / ``</|DSML|`` into ``<｜DSML｜`` / ``</｜DSML｜`` (each tag on its own, so opening and
closing tags may use different spellings). ``|DSML|`` elsewhere is text, and a value's text that
spells an ASCII-bar tag start reads in the fullwidth spelling.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field

from sglang_v4.entrypoints.chat_encoding import DSML
from sglang_v4.entrypoints.chat_encoding_tools import THINK_END
from sglang_v4.entrypoints.openai.dsml_arguments import DsmlArgumentsMixin
from sglang_v4.entrypoints.openai.dsml_grammar import (
    DSML_TAG_HEAD as _DSML_TAG_HEAD,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    DSML_TAG_TAIL as _DSML_TAG_TAIL,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    INVOKE_TAG as _INVOKE_TAG,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    PARAM_TAG as _PARAM_TAG,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_BLOCK as _BLOCK,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_INVOKE as _INVOKE,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_INVOKE_TAG as _INVOKE_TAG_S,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_JSON_ARGS as _JSON_ARGS,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_PARAM_TAG as _PARAM_TAG_S,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_RAW as _RAW,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_TEXT as _TEXT,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_VALUE as _VALUE,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    WRAPPER_OPEN as _WRAPPER_OPEN,
)
from sglang_v4.entrypoints.openai.dsml_grammar import DsmlBarNormalizer
from sglang_v4.entrypoints.openai.dsml_grammar import (
    partial_suffix as _partial_suffix,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    tag_may_continue as _tag_may_continue,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    trailing_newlines as _trailing_newlines,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    trailing_ws as _trailing_ws,
)
from sglang_v4.entrypoints.openai.dsml_malformed import DsmlMalformedMixin
from sglang_v4.entrypoints.openai.tool_args_repair import (
    WRAPPER_KEYS,
)
from sglang_v4.entrypoints.openai.tool_calls import (
    TOOL_CALL_PARSERS,
    ParsedToolCall,
    ToolCallDelta,
    canonical_tool_call_parser,
    make_tool_call_id,
)

__all__ = [
    "TOOL_CALL_PARSERS",
    "DsmlToolParser",
    "ToolCallDelta",
    "ParsedToolCall",
    "canonical_tool_call_parser",
    "make_tool_call_id",
    "parse_tool_calls",
]


@dataclass
class DsmlToolParser(DsmlArgumentsMixin, DsmlMalformedMixin):
    """Streaming DSML tool-call parser (see the module docstring): the text, block and tag
    states here; a call's arguments, built while its values arrive, in
    :class:`~.dsml_arguments.DsmlArgumentsMixin`; malformed invokes and blocks dropped in
    :class:`~.dsml_malformed.DsmlMalformedMixin`.

    Args:
        tool_names: names of the request's tools; a call of any other name makes its block
            malformed. ``None`` accepts every name. A mapping name -> ``parameters`` schema also
            enables the wrapper repair (module docstring).
        block: the block tag name, ``"tool_calls"`` (V4) or ``"function_calls"`` (V3.2).

    Attributes:
        calls: the calls of every block that closed properly, in order, then those of a block
            the generation ended in (:attr:`truncated`; the last one may be ``partial``).
        malformed: a block (or an invoke of one) was malformed, or the generation stopped inside
            an invoke (its text was dropped).
        dropped_calls: the indexes of the calls whose deltas went out before their invoke turned
            out malformed (no such call is in :attr:`calls`).
        truncated: the generation ended inside a block or with the start of one (set by
            :meth:`finish`).
    """

    tool_names: Collection[str] | None = None
    block: str = "tool_calls"
    calls: list[ParsedToolCall] = field(default_factory=list)
    malformed: bool = False
    truncated: bool = False
    dropped_calls: set[int] = field(default_factory=set)
    _state: int = _TEXT
    _buf: str = ""
    _raw: str = ""  # text of the open block, from the newlines before its start marker
    _block_calls: list[ParsedToolCall] = field(default_factory=list)
    _after_block: bool = False
    _bare: bool = False  # the open block had no wrapper (it started at an invoke)
    _skip_invoke: bool = False  # dropping a malformed invoke of a wrapped block up to its end
    _cur_end: str = ""  # the closing tag of the open block (its wrapper's name)
    _hold: bool = False  # the open call's arguments are held back (a possible wrapper)
    _hold_undecided: bool = False  # ... its JSON body's first key is not known yet
    _withheld: bool = False  # the open call is a bare block's first, not confirmed yet: none of it out
    _n_calls: int = 0
    _call: ParsedToolCall | None = None
    _param_names: set[str] = field(default_factory=set)
    _value_is_string: bool = True
    _value: str = ""
    _held_ws: str = ""
    _text_tail: str = ""  # the last character of the content given out so far
    _coerce_types: frozenset[str] | None = None  # a string value to coerce (DsmlArgumentsMixin)
    _bars: DsmlBarNormalizer = field(default_factory=DsmlBarNormalizer)  # ASCII-bar tags read as fullwidth

    def __post_init__(self) -> None:
        self.block_start = f"<{DSML}{self.block}>"
        self.block_end = f"</{DSML}{self.block}>"
        self._cur_end = self.block_end
        self.invoke_start = f"<{DSML}invoke"
        self.invoke_end = f"</{DSML}invoke>"
        self.param_start = f"<{DSML}parameter"
        self.param_end = f"</{DSML}parameter>"

    @property
    def complete(self) -> bool:
        """At least one call was parsed and no block was malformed, left open or cut."""
        return bool(self.calls) and not self.malformed and not self.truncated and self._state == _TEXT

    @property
    def calls_made(self) -> bool:
        """At least one call was parsed and no call was cut: the finish reason of a whole message
        whose generation stopped is ``"tool_calls"``. The block may have been left open after its
        last closed invoke (a generation *stopped* there made its calls, sgl-project/sglang#40236),
        and a malformed invoke beside whole calls is dropped without unmaking them, as SGLang's
        and vLLM's DeepSeek parsers answer such output (module docstring)."""
        return bool(self.calls) and not any(c.partial for c in self.calls)

    @property
    def calls_whole(self) -> bool:
        """:attr:`calls_made`, and no dropped call's deltas went out: the finish reason of a
        *stream* is ``"tool_calls"`` only when every call the client folded is a call."""
        return self.calls_made and not self.dropped_calls

    # ------------------------------------------------------------------ feeding
    def feed(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        """Consume the next generated text.

        Returns:
            ``(content_delta, tool_call_deltas)``; either may be empty.
        """
        return self._read(self._bars.feed(text))

    def _read(self, text: str) -> tuple[str, list[ToolCallDelta]]:
        """:meth:`feed` of text whose tags are in the fullwidth spelling."""
        self._buf += text
        content: list[str] = []
        deltas: list[ToolCallDelta] = []
        while self._step(content, deltas):
            pass
        out = "".join(content)
        self._text_tail = out[-1:] or self._text_tail
        return out, deltas

    def finish(self, stopped: bool = False) -> tuple[str, list[ToolCallDelta]]:
        """End of generation: release held-back text; an open block is cut (module docstring).

        Args:
            stopped: the generation *stopped* (EOS, a stop token or a stop string; finish reason
                ``"stop"``) rather than being cut by ``max_tokens``: an invoke left open is
                dropped, not a partial call, and a held-back first part of a block start without
                the ``<｜DSML｜`` marker (``"<"``, ``"<｜DS"``) is text.

        Returns:
            ``(content_delta, tool_call_deltas)``: the held-back plain text (nothing of an open
            block); a cut call's held-back arguments (a possible wrapper), or the whole cut call
            of a bare block cut before its structure confirmed it (withheld until then), else no
            delta: the rest was streamed already.
        """
        held = self._bars.finish()  # a tail that was no ASCII-bar tag start: read as text
        if held:
            content, deltas = self._read(held)
            rest, more = self.finish(stopped)
            return content + rest, deltas + more
        rest, self._buf = self._buf, ""
        if self._state == _RAW:  # the rest of a malformed block (or invoke): dropped
            self.calls.extend(self._block_calls)  # the invokes that closed before stay calls
            self._block_calls, self._skip_invoke = [], False
            return "", []
        if self._state == _TEXT:
            if self._after_block:
                rest = rest.lstrip()
            marker = max(
                _partial_suffix(rest, self.block_start),
                _partial_suffix(rest, self.invoke_start),
                _partial_suffix(rest, f"<{DSML}"),
            )
            tag = _DSML_TAG_TAIL.search(rest)  # a wrapper tag (or its start) that nothing followed
            marker = max(marker, len(rest) - tag.start() if tag else 0)
            if not marker or (stopped and f"<{DSML}" not in rest[len(rest) - marker :]):
                # a generation that stopped opens no block: a held-back "<", "\n\n<｜" ... is text
                return rest, []
            self.truncated = True  # the output ends with the first characters of a block start
            rest = rest[: len(rest) - marker]
            return rest[: len(rest) - _trailing_newlines(rest, len(rest))], []
        if self._state == _BLOCK and self._bare:  # a bare block ends with its last invoke
            self.calls.extend(self._block_calls)
            self._block_calls, self._raw, self._state = [], "", _TEXT
            return "", []
        self.truncated = True
        if stopped and (self._state != _BLOCK or not self._block_calls):
            self._drop_block()  # stopped inside an invoke (or before the first): no call
            self._state = _TEXT
            return "", []
        cut = self._call
        held = []
        if cut is not None:
            cut.partial = True
            if self._withheld:  # a bare block's call cut before it was confirmed: it goes out now
                held = [ToolCallDelta(cut.index, id=cut.id, name=cut.name, arguments=cut.arguments)]
            elif self._hold and cut.arguments:  # never streamed: the generated part goes out now
                held = [ToolCallDelta(cut.index, arguments=cut.arguments)]
        self._hold = self._hold_undecided = self._withheld = False
        self.calls.extend(self._block_calls + ([cut] if cut is not None else []))
        self._block_calls, self._call, self._raw, self._held_ws = [], None, "", ""
        self._state = _TEXT
        return "", held

    # ------------------------------------------------------------------ state machine
    def _take(self, n: int) -> str:
        piece, self._buf = self._buf[:n], self._buf[n:]
        self._raw += piece
        return piece

    def _skip_ws(self) -> None:
        n = len(self._buf) - len(self._buf.lstrip())
        if n:
            self._take(n)

    def _expect(self, markers: tuple[str, ...]) -> str | None:
        """The marker the buffer starts with; ``""`` when it may still become one (a U+FFFD at
        its end read as :func:`~.dsml_grammar.partial_suffix` reads it); None: none."""
        for m in markers:
            if self._buf.startswith(m):
                return m
        if any(_partial_suffix(self._buf, m) == len(self._buf) for m in markers):
            return ""
        return None

    def _step(self, content: list[str], deltas: list[ToolCallDelta]) -> bool:
        """Advance once; False when more text is needed."""
        st = self._state
        if st == _RAW and self._skip_invoke:  # a malformed invoke is dropped up to its end
            return self._skip_to_invoke_end()
        if st == _RAW:  # a malformed block is dropped up to its end
            return self._skip_to_block_end()
        if st == _TEXT:
            return self._step_text(content)
        if st in (_BLOCK, _INVOKE):
            self._skip_ws()
        if not self._buf:
            return False
        if st == _BLOCK:
            m = self._expect((self.invoke_start, self._cur_end))
            if m is None and self._bare and self._block_calls:  # a bare block ends: text follows
                self.calls.extend(self._block_calls)
                self._block_calls, self._raw, self._state = [], "", _TEXT
                return True
            if m is None or (m == self._cur_end and not self._block_calls):
                self._drop_block()
                return True
            if m == "":
                return False
            self._take(len(m))
            if m == self._cur_end:
                self.calls.extend(self._block_calls)
                self._block_calls = []
                self._raw = ""
                self._state, self._after_block = _TEXT, True
            else:
                self._state = _INVOKE_TAG_S
            return True
        if st in (_INVOKE_TAG_S, _PARAM_TAG_S):
            return self._step_tag(content, deltas)
        if st == _INVOKE:
            m = self._expect((self.param_start, self.invoke_end))
            if m is None and self._buf.startswith("{") and not self._param_names:
                if self._withheld:  # a bare block's first invoke: a JSON object must begin here
                    head = self._buf[1:].lstrip()
                    if not head:
                        return False
                    if head[0] not in '"}':  # ``{`` then prose: no JSON body
                        self._unopen_bare(content)
                        return True
                self._state, self._value = _JSON_ARGS, ""
                self._hold = self._hold_undecided = any(self._may_wrap(k) for k in WRAPPER_KEYS)
                self._confirm(deltas)
                return True
            if m is None and self._bare and not self._block_calls and not self._param_names:
                self._unopen_bare(content)  # prose that mentions an invoke tag
                return True
            if m is None:
                self._drop_invoke()
                return True
            if m == "":
                return False
            self._take(len(m))
            self._confirm(deltas)
            if m == self.param_start:
                self._state = _PARAM_TAG_S
            else:
                self._close_invoke("{}" if not self._param_names else "}", deltas)
            return True
        return self._step_value(content, deltas)

    def _step_text(self, content: list[str]) -> bool:
        buf = self._buf
        if self._after_block:
            # whitespace right after a block is held: dropped when the reply ends there (or at
            # a stray ``</think>``), or when no text, or text ending in whitespace, came before
            # the block; else kept when text follows, as the one separator between that text
            # and the text before the block (``"Hi.<block> More."`` -> ``"Hi. More."``)
            head = buf.lstrip()
            if not head or (THINK_END.startswith(head) and head != THINK_END):
                return False  # all whitespace, or what may still become the stray ``</think>``
            if head.startswith(THINK_END):  # the end of the thinking the block was written in
                self._buf = head[len(THINK_END) :]
                return True
            self._after_block = False
            tail = "".join(content)[-1:] or self._text_tail
            if not tail or tail.isspace():
                buf = self._buf = head
        wrapper = _WRAPPER_OPEN.search(buf)
        if wrapper is not None and wrapper.group(1) in ("invoke", "parameter"):
            wrapper = None  # not a wrapper: an invoke is looked for below
        inv = buf.find(self.invoke_start)
        if wrapper is not None and (inv < 0 or wrapper.start() < inv):
            name, rest = wrapper.group(1), buf[wrapper.end() :].lstrip()
            if name != self.block and (not rest or self.invoke_start.startswith(rest)):
                cut = wrapper.start() - _trailing_ws(buf, wrapper.start())
                content.append(buf[:cut])  # what follows the tag decides whether it opens a block
                self._buf = buf[cut:]
                return False
            if name != self.block and not rest.startswith(self.invoke_start):
                content.append(buf[: wrapper.end()])  # a DSML tag of another name before text: text
                self._buf = buf[wrapper.end() :]
                return True
            self._open_block(content, buf, wrapper.start(), wrapper.end(), f"</{DSML}{name}>")
            return True
        if inv >= 0:  # a bare block (module docstring)
            self._open_block(content, buf, inv, inv + len(self.invoke_start), None)
            return True
        keep = max(_partial_suffix(buf, self.block_start), _partial_suffix(buf, self.invoke_start))
        head = _DSML_TAG_HEAD.search(buf)
        keep = max(keep, _partial_suffix(buf, f"<{DSML}"), len(buf) - head.start() if head else 0)
        keep += _trailing_ws(buf, len(buf) - keep)
        content.append(buf[: len(buf) - keep])
        self._buf = buf[len(buf) - keep :]
        return False

    def _open_block(self, content: list[str], buf: str, start: int, end: int, close: str | None) -> None:
        """Open a block whose marker is ``buf[start:end]`` (``close``: its wrapper's closing tag;
        ``None``: a bare block, whose marker is its first invoke's start)."""
        ws = _trailing_newlines(buf, start)  # the separator; other whitespace is the answer's
        content.append(buf[: start - ws])
        self._raw = buf[start - ws : end]
        self._buf = buf[end:]
        self._bare = close is None
        self._cur_end = close or self.block_end
        self._state = _INVOKE_TAG_S if self._bare else _BLOCK
        self._block_calls = []

    def _step_tag(self, content: list[str], deltas: list[ToolCallDelta]) -> bool:
        is_invoke = self._state == _INVOKE_TAG_S
        m = (_INVOKE_TAG if is_invoke else _PARAM_TAG).match(self._buf)
        if m is None:
            if not _tag_may_continue(self._buf):
                if is_invoke and self._bare and not self._block_calls:
                    self._unopen_bare(content)
                else:
                    self._drop_invoke()
                return True
            return False
        self._take(m.end())
        if is_invoke:
            name = m.group(1)
            if self.tool_names is not None and name not in self.tool_names:
                self._drop_invoke()
                return True
            self._call = ParsedToolCall(self._n_calls, make_tool_call_id(), name, "")
            self._n_calls += 1
            self._param_names = set()
            self._state = _INVOKE
            # a bare block's first call goes out once its structure confirms it (_confirm)
            self._withheld = self._bare and not self._block_calls
            if not self._withheld:
                deltas.append(ToolCallDelta(self._call.index, id=self._call.id, name=name))
            if m.group(2):  # a self-closing invoke tag: its call has no arguments
                self._confirm(deltas)
                self._close_invoke("{}", deltas)
            return True
        key, is_string = m.group(1), m.group(2) == "true"
        if key in self._param_names:
            self._drop_invoke()
            return True
        if not self._param_names:
            self._hold = self._may_wrap(key)
        elif self._hold:  # a second parameter: no wrapper
            self._release(deltas)
        head = ("{" if not self._param_names else ", ") + json.dumps(key, ensure_ascii=False) + ": "
        self._param_names.add(key)
        self._value_is_string, self._value, self._held_ws = is_string, "", ""
        self._coerce_types = self._string_value_types(key, is_string)
        self._emit(head + ('"' if is_string and self._coerce_types is None else ""), deltas)
        self._state = _VALUE
        return True


def parse_tool_calls(
    text: str, tool_names: Collection[str] | None = None, block: str = "tool_calls", stopped: bool = False
) -> tuple[str, list[ParsedToolCall], bool]:
    """Non-streaming parse of a whole completion (same rules as the streaming parser).

    Args:
        text: the generated text.
        tool_names: see :class:`DsmlToolParser`.
        block: see :class:`DsmlToolParser`.
        stopped: the generation stopped (finish reason ``"stop"``), see
            :meth:`DsmlToolParser.finish`; False reads an open block as cut by ``max_tokens``.

    Returns:
        ``(content, calls, complete)``: the text outside blocks (malformed and cut blocks
        left out), the calls (those of a cut block included, the
        last one possibly ``partial``), and :attr:`DsmlToolParser.complete`.
    """
    p = DsmlToolParser(tool_names, block)
    c1, _ = p.feed(text)
    c2, _ = p.finish(stopped)
    return c1 + c2, list(p.calls), p.complete
