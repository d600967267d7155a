"""Batch input lines: integers past the 64-bit range stay exact; a UTF-8 BOM is dropped.

A body line decoded with orjson alone turned ``123456789012345678901234567`` into the float
``1.2345678901234568e+26``, so a range error quoted a rounded value. Oracle: Python's own integer
literal (RFC 8259 leaves the range to the parser; the standard library's ``json`` is exact).
"""

from __future__ import annotations

import codecs
import json

from sglang_v4.entrypoints.openai.batch_input import parse_batch_input

BIG = 123456789012345678901234567


def test_batch_line_body_keeps_a_big_integer_exact() -> None:
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"messages": [{"role": "user", "content": "x"}], "seed": BIG},
    }
    lines, errors = parse_batch_input(json.dumps(line).encode() + b"\n", "/v1/chat/completions")
    assert not errors, errors
    seed = lines[0].body["seed"]
    assert type(seed) is int and seed == BIG, seed


def test_batch_file_with_a_utf8_byte_order_mark_reads_as_without_it() -> None:
    """A JSONL file saved with a BOM (Windows editors) is read like the same file without it.

    Oracle: Python's ``json.loads`` on bytes, which detects and drops the UTF-8 BOM.
    """
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"max_tokens": 1}}
    raw = codecs.BOM_UTF8 + json.dumps(line).encode() + b"\n"
    assert json.loads(raw.split(b"\n")[0]) == line
    lines, errors = parse_batch_input(raw, "/v1/chat/completions")
    assert not errors, errors
    assert [(x.custom_id, x.body) for x in lines] == [("a", {"max_tokens": 1})]
