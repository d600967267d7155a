"""``decode_body`` on gzip bodies of many members (RFC 1952 section 2.2: a gzip file is a series of
members), checked against the standard library's :func:`gzip.decompress`, which reads every member.

A body of a few thousand small members (tens of KiB) was decoded one member per recursive call and
raised ``RecursionError``, which no handler turned into a 4xx.
"""

from __future__ import annotations

import gzip

import pytest
from sglang_v4.entrypoints.request_encoding import BodyDecodeError, decode_body


@pytest.mark.parametrize("members", [1, 2, 3000])
def test_many_gzip_members_decode_as_the_stdlib_does(members: int) -> None:
    body = b"".join(gzip.compress(b'{"k": %d}' % i, mtime=0) for i in range(members))
    assert decode_body(body, ["gzip"], 1 << 26) == gzip.decompress(body)


def test_many_gzip_members_over_the_limit_are_413() -> None:
    body = gzip.compress(b"x" * 1000, mtime=0) * 3000  # 3,000,000 bytes decoded
    with pytest.raises(BodyDecodeError) as e:
        decode_body(body, ["gzip"], 2_999_999)
    assert e.value.status == 413
    assert len(decode_body(body, ["gzip"], 3_000_000)) == len(gzip.decompress(body))
