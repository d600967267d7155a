"""A DSML tool call's arguments, built while its values arrive: the part of the streaming
parser (:class:`~.tool_parser.DsmlToolParser`, module docstring of :mod:`.tool_parser`) that
turns ``<｜DSML｜parameter>`` values (or an invoke's JSON body) into the JSON text of
``function.arguments`` and streams it as ``ToolCallDelta`` fragments.

Each parameter adds ``"key": value`` (``{`` first, then ``", "``, as DeepSeek's reference decoder
joins them); a ``string="true"`` value is streamed JSON-escaped, a ``string="false"`` value as its
raw JSON text without surrounding whitespace, checked with ``json.loads`` when it ends; a
``string="true"`` value of a parameter whose schema allows no string is held to its end and goes
out as the JSON value it spells (vllm-project/vllm#30797, :mod:`.tool_args_repair`), and a
``string="false"`` value of one whose schema allows a string is held to its end and goes out as
written when it is a JSON value, else as that text's JSON string (instead of making the block
malformed). A value
holding the invoke's own markup (a closing tag left out), or a JSON value or body naming a key
twice (as a parameter written twice does), makes the block malformed. Arguments
that may be a spurious ``arguments`` / ``input`` wrapper are held back and released or repaired
(:mod:`.tool_args_repair`); a bare block's first call is withheld until its structure confirms it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from sglang_v4.entrypoints.chat_encoding import DSML
from sglang_v4.entrypoints.openai.dsml_grammar import (
    DSML_TAG_START as _DSML_TAG_START,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_BLOCK as _BLOCK,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_INVOKE as _INVOKE,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STATE_JSON_ARGS as _JSON_ARGS,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    STRUCTURAL_OPEN as _STRUCTURAL_OPEN,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    json_value as _json_value,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    partial_suffix as _partial_suffix,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    reject_constant as _reject_constant,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    trailing_ws as _trailing_ws,
)
from sglang_v4.entrypoints.openai.dsml_grammar import (
    unique_object as _unique,
)
from sglang_v4.entrypoints.openai.tool_args_repair import (
    coerce_string_value,
    is_wrapper_key,
    json_body_wraps,
    non_string_types,
    string_types,
    unwrap_arguments,
)
from sglang_v4.entrypoints.openai.tool_calls import ToolCallDelta

if TYPE_CHECKING:
    from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser

__all__ = ["DsmlArgumentsMixin"]


class DsmlArgumentsMixin:
    """The arguments half of :class:`~.tool_parser.DsmlToolParser` (module docstring); its state
    (the open call, its parameter names, the value read so far, the hold flags) is the parser's."""

    def _step_value(self: DsmlToolParser, content: list[str], deltas: list[ToolCallDelta]) -> bool:
        end_marker = self.invoke_end if self._state == _JSON_ARGS else self.param_end
        buf = self._buf
        pos = buf.find(end_marker)
        piece = buf if pos < 0 else buf[:pos]
        if self._structural_tag_in(piece):  # the invoke's markup in a value: a closer is missing
            self._drop_invoke()
            return True
        keep = 0  # what may still become the end marker waits for more text; DSML-looking text
        # waits for the value's end: its closing tag makes it the value's text, the invoke's own
        # markup (a closer left out) drops the block, and nothing of it went out as arguments
        if pos < 0:
            tag = _DSML_TAG_START.search(buf)
            keep = len(buf) - tag.start() if tag else _partial_suffix(buf, end_marker)
            keep = max(keep, _partial_suffix(buf, f"<{DSML}"), _partial_suffix(buf, f"</{DSML}"))
        piece = piece[: len(piece) - keep]
        raw_json = self._state == _JSON_ARGS or not self._value_is_string
        if raw_json:  # hold back trailing whitespace: it is dropped if the value ends there
            piece = self._held_ws + piece
            ws = _trailing_ws(piece, len(piece))
            piece, self._held_ws = piece[: len(piece) - ws], piece[len(piece) - ws :]
            if not self._value:  # and leading whitespace is dropped: JSON ignores both
                piece = piece.lstrip()
        self._take(len(buf) - keep if pos < 0 else pos)
        self._value += piece
        if self._hold_undecided:
            self._decide_json_hold(piece, deltas)
            piece = ""  # in the call's arguments already (or sent by the release)
        if self._coerce_types is not None:  # held to the value's end (_string_value_types)
            piece = ""
        if pos < 0:
            if piece:
                self._emit(json.dumps(piece, ensure_ascii=False)[1:-1] if not raw_json else piece, deltas)
            return False
        self._take(len(end_marker))
        self._held_ws = ""
        if self._state == _JSON_ARGS:
            try:
                ok = isinstance(
                    json.loads(self._value, parse_constant=_reject_constant, object_pairs_hook=_unique), dict
                )
            except (ValueError, RecursionError):  # RecursionError: nested deeper than json decodes
                ok = False
            if not ok:
                self._drop_invoke(ended=True)
                return True
            self._emit(piece, deltas)
            self._close_invoke("", deltas)
            return True
        if self._coerce_types is not None:
            if self._value_is_string:
                fixed = coerce_string_value(self._value, self._coerce_types)
            else:  # string="false" for a parameter that allows a string: JSON as written, or the text
                fixed = (
                    self._value if _json_value(self._value) else json.dumps(self._value, ensure_ascii=False)
                )
            self._emit(fixed, deltas)
            self._state = _INVOKE
            return True
        if not self._value_is_string and not _json_value(self._value):
            self._drop_invoke()
            return True
        self._emit(
            json.dumps(piece, ensure_ascii=False)[1:-1] + '"' if self._value_is_string else piece, deltas
        )
        self._state = _INVOKE
        return True

    def _structural_tag_in(self: DsmlToolParser, piece: str) -> bool:
        """Whether ``piece`` (text of a value) holds a DSML tag that can only follow a value whose
        closing tag was left out: a parameter or invoke opening (``<｜DSML｜parameter`` and the
        whitespace before its attributes), a parameter or invoke closing, the open block's closing
        tag. Other DSML-looking text in a value (``<｜DSML｜tool_calls>`` quoted in a string, a
        ``</｜DSML｜parameter |`` that is no closing tag) is the value's text, as SGLang's
        DeepSeek-V4 detector keeps it."""
        if self.param_end in piece or self.invoke_end in piece or self._cur_end in piece:
            return True
        return _STRUCTURAL_OPEN.search(piece) is not None

    def _may_wrap(self: DsmlToolParser, key: str) -> bool:
        """Whether parameter ``key`` of the open call may be a spurious wrapper (the tools'
        schemas are known and the tool declares no such parameter)."""
        names = self.tool_names
        if self._call is None or not isinstance(names, Mapping) or self._call.name not in names:
            return False
        return is_wrapper_key(key, names[self._call.name])

    def _string_value_types(self: DsmlToolParser, key: str, is_string: bool) -> frozenset[str] | None:
        """The types a value of parameter ``key`` of the open call is coerced to, or ``None``: for
        a ``string="true"`` value, those of a schema that allows no string
        (:func:`~.tool_args_repair.non_string_types`); for a ``string="false"`` one, those of a
        schema that allows a string (:func:`~.tool_args_repair.string_types`). Such a value is
        held back to its end; a ``string="true"`` one then goes out as the JSON value it spells
        when that is of one of the types, a ``string="false"`` one as written when it is a JSON
        value; failing that, as the string written."""
        names = self.tool_names
        if self._call is None or not isinstance(names, Mapping) or self._call.name not in names:
            return None
        schema = names[self._call.name]
        return non_string_types(key, schema) if is_string else string_types(key, schema)

    def _release(self: DsmlToolParser, deltas: list[ToolCallDelta]) -> None:
        """Stop holding the open call's arguments back: what was held goes out as a delta."""
        assert self._call is not None
        self._hold = self._hold_undecided = False
        if self._call.arguments and not self._withheld:
            deltas.append(ToolCallDelta(self._call.index, arguments=self._call.arguments))

    def _decide_json_hold(self: DsmlToolParser, piece: str, deltas: list[ToolCallDelta]) -> None:
        """A JSON body's arguments are held until its first key is known: a wrapper key keeps
        them held to the end of the invoke; anything else releases them."""
        assert self._call is not None
        self._call.arguments += piece
        names = self.tool_names
        schema = names.get(self._call.name) if isinstance(names, Mapping) else None
        wraps = json_body_wraps(self._value, schema)
        if wraps:
            self._hold_undecided = False
        elif wraps is not None:
            self._release(deltas)

    def _emit(self: DsmlToolParser, fragment: str, deltas: list[ToolCallDelta]) -> None:
        assert self._call is not None
        if not fragment:
            return
        self._call.arguments += fragment
        if self._hold or self._withheld:
            return
        if deltas and deltas[-1].index == self._call.index:
            deltas[-1].arguments += fragment
        else:
            deltas.append(ToolCallDelta(self._call.index, arguments=fragment))

    def _confirm(self: DsmlToolParser, deltas: list[ToolCallDelta]) -> None:
        """The open invoke's structure goes on after its tag (a parameter tag, a JSON body or its
        closing tag): a bare block's first call, withheld until now, goes out as a wrapped call's
        first delta (``id`` and ``name``); its arguments follow as they are generated."""
        if self._withheld:
            assert self._call is not None
            c = self._call
            deltas.append(ToolCallDelta(c.index, id=c.id, name=c.name))
            self._withheld = False

    def _close_invoke(self: DsmlToolParser, tail: str, deltas: list[ToolCallDelta]) -> None:
        assert self._call is not None
        self._emit(tail, deltas)
        if self._hold:
            names = self.tool_names
            schema = names.get(self._call.name) if isinstance(names, Mapping) else None
            self._call.arguments = unwrap_arguments(self._call.arguments, schema) or self._call.arguments
            self._hold = self._hold_undecided = False
            deltas.append(ToolCallDelta(self._call.index, arguments=self._call.arguments))
        self._block_calls.append(self._call)
        self._call = None
        self._state = _BLOCK
