"""``format: "ipv4"`` / ``"ipv6"`` written as an exact ``pattern`` (RFC 2673 / RFC 4291 text).

A ``string`` node's ``format`` of these becomes a ``pattern`` admitting exactly the addresses JSON
Schema's formats name. xgrammar's built-in regexes differ both ways: its ``ipv4`` takes octets
with a leading zero (``"01.2.3.4"``, ``"1.2.3.04"``), which the JSON Schema Test Suite's
``optional/format/ipv4.json`` refuses (read as octal by many parsers, CVE-2021-28918) and
Python's ``ipaddress`` refuses too; its ``ipv6`` refuses the forms ending in an IPv4 address
after six groups or after ``::`` with groups on both sides (``"1:2:3:4:5:6:1.2.3.4"``,
``"1::2:1.2.3.4"``, valid per RFC 4291 section 2.2) and takes an embedded IPv4 address with a
leading zero (``"::ffff:01.2.3.4"``). The patterns follow RFC 3986 section 3.2.2's
``IPv6address`` / ``IPv4address`` ABNF (``dec-octet`` has no leading zero; ``h16`` is one to four
hexadecimal digits, either case); no zone identifier (``%eth0``), which the ``ipv6`` format
excludes. A node that also sets ``pattern``, or length bounds that do not fold into the
format's pattern, is left alone (those are refused by name later:
:mod:`sglang_v4.sampling.json_schema_support`).

One of the rewrites of :func:`~sglang_v4.sampling.json_schema_rewrite.normalize_json_schema`.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.sampling.json_schema_date_format import exact_format

__all__ = ["IP_FORMAT_PATTERNS", "exact_ip_format"]

# RFC 3986 section 3.2.2, written without look-arounds, non-capturing groups or ``?`` (xgrammar's
# regex subset; an optional group is ``(X|)``, see json_schema_rewrite.optional_groups_as_alternations).
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_IPV4 = rf"{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"({_H16}:{_H16}|{_IPV4})"


def _head(n: int) -> str:
    """The groups before ``::`` in RFC 3986's ``[ *n( h16 ":" ) h16 ]``: none, or one to n+1."""
    if n == 0:
        return f"({_H16}|)"
    return f"(({_H16}:){{0,{n}}}{_H16}|)"


_IPV6 = "|".join(
    (
        f"({_H16}:){{6}}{_LS32}",
        f"::({_H16}:){{5}}{_LS32}",
        f"{_head(0)}::({_H16}:){{4}}{_LS32}",
        f"{_head(1)}::({_H16}:){{3}}{_LS32}",
        f"{_head(2)}::({_H16}:){{2}}{_LS32}",
        f"{_head(3)}::{_H16}:{_LS32}",
        f"{_head(4)}::{_LS32}",
        f"{_head(5)}::{_H16}",
        f"{_head(6)}::",
    )
)
#: The ``pattern`` each rewritten ``format`` becomes (module docstring).
IP_FORMAT_PATTERNS = {
    "ipv4": f"^{_IPV4}$",
    "ipv6": f"^({_IPV6})$",
}


def exact_ip_format(node: dict[str, Any]) -> None:
    """Replace, in place, a ``string`` node's ``format`` of :data:`IP_FORMAT_PATTERNS` by its
    exact ``pattern`` (module docstring); other nodes are left as they are."""
    exact_format(node, IP_FORMAT_PATTERNS)
