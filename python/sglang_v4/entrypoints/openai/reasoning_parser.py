"""Split DeepSeek-V4 thinking-mode output into ``reasoning_content`` and ``content``.

In thinking mode the prompt ends with ``<think>``, so generation starts inside the reasoning block
and the first ``</think>`` ends it (SGLang's DeepSeek reasoning detector behaves the same way: the
text is reasoning until the end token; without an end token everything is reasoning). A stray
leading ``<think>`` is dropped. The streaming parser holds back a tail that could be the start of
``</think>`` split across chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ReasoningParser", "split_reasoning"]

THINK_START = "<think>"
THINK_END = "</think>"


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Non-streaming split of a full completion.

    Returns:
        ``(reasoning_content, content)``; ``reasoning_content`` is ``None`` when empty. Without a
        ``</think>`` the whole text is reasoning and ``content`` is ``""``. Whitespace right after
        ``</think>`` is removed from ``content``.
    """
    p = ReasoningParser()
    r1, c1 = p.feed(text)
    r2, c2 = p.flush()
    reasoning = r1 + r2
    return (reasoning or None), c1 + c2


@dataclass
class ReasoningParser:
    """Incremental parser; feed text deltas, get ``(reasoning_delta, content_delta)`` pairs.

    Attributes:
        stream_reasoning: when False, reasoning is held until it is complete and returned in one piece.
    """

    stream_reasoning: bool = True
    in_reasoning: bool = True
    _buf: str = ""
    _held_reasoning: str = ""
    _started: bool = False
    _strip_content_ws: bool = False

    def feed(self, delta: str) -> tuple[str, str]:
        """Consume a text delta.

        Returns:
            ``(reasoning_delta, content_delta)`` (either may be ``""``).
        """
        self._buf += delta
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
            pos = self._buf.find(THINK_END)
            if pos >= 0:
                reasoning = self._buf[:pos]
                self._buf = self._buf[pos + len(THINK_END) :]
                self.in_reasoning = False
                self._strip_content_ws = True
            else:
                keep = _partial_suffix_len(self._buf, THINK_END)
                reasoning = self._buf[: len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep :]
            if not self.stream_reasoning:
                self._held_reasoning += reasoning
                reasoning = ""
                if not self.in_reasoning:
                    reasoning, self._held_reasoning = self._held_reasoning, ""
        if not self.in_reasoning:
            content = self._buf
            self._buf = ""
            if self._strip_content_ws:
                content = content.lstrip()
                if content:
                    self._strip_content_ws = False
        return reasoning, content

    def flush(self) -> tuple[str, str]:
        """End of stream: return whatever is still held back as ``(reasoning, content)``."""
        rest, self._buf = self._buf, ""
        if not self._started:
            rest = rest.lstrip()
            if rest.startswith(THINK_START):
                rest = rest[len(THINK_START) :]
            self._started = True
        if self.in_reasoning:
            out = self._held_reasoning + rest
            self._held_reasoning = ""
            return out, ""
        return "", rest.lstrip() if self._strip_content_ws else rest


def _partial_suffix_len(text: str, token: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``token``."""
    for n in range(min(len(text), len(token) - 1), 0, -1):
        if token.startswith(text[-n:]):
            return n
    return 0
