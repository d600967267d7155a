"""SGLang's ``--incremental-streaming-output``: cumulative ``/generate`` stream chunks to deltas.

The tokenizer manager streams every chunk with everything so far (SGLang's default): the text,
``output_ids`` and the output-side logprob lists. With the flag, SGLang sends each chunk with only
what is new since the previous chunk of the same request; prompt-side fields (``input_*``) and the
counts in ``meta_info`` stay as they are. A batch stream's chunks carry an ``index`` and each index
is sliced on its own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OUTPUT_SIDE_META_KEYS", "IncrementalStreamSlicer"]

#: ``meta_info`` lists with one entry per output token (sliced like ``output_ids``).
OUTPUT_SIDE_META_KEYS = ("output_token_logprobs", "output_top_logprobs", "output_token_ids_logprobs")


class IncrementalStreamSlicer:
    """Turns the cumulative chunks of one stream into incremental ones (see the module docstring)."""

    def __init__(self) -> None:
        #: per ``index``: (characters of text sent, output ids sent)
        self._sent: dict[int, tuple[int, int]] = {}

    def slice(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """The part of ``chunk`` (a cumulative ``/generate`` stream chunk) not sent before.

        Returns a new dict (``chunk`` is not modified): ``text`` and ``output_ids`` hold what follows
        the previously sliced chunk of the same ``index``, as do the output-side ``meta_info``
        lists. A chunk without ``output_ids`` (an error) is returned unchanged.
        """
        if not isinstance(chunk, dict) or "output_ids" not in chunk:
            return chunk
        idx = int(chunk.get("index", 0))
        text_sent, ids_sent = self._sent.get(idx, (0, 0))
        out = dict(chunk)
        ids = chunk["output_ids"]
        out["output_ids"] = list(ids[ids_sent:])
        text = chunk.get("text")
        if isinstance(text, str):
            out["text"] = text[text_sent:]
            text_sent = len(text)
        meta = chunk.get("meta_info")
        if isinstance(meta, dict):
            meta = dict(meta)
            for key in OUTPUT_SIDE_META_KEYS:
                if isinstance(meta.get(key), list):
                    meta[key] = meta[key][ids_sent:]
            out["meta_info"] = meta
        self._sent[idx] = (text_sent, len(ids))
        return out
