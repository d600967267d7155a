"""A twenty-sixth set of public bug reports on tokenization and chat-prompt rendering: BOS
handling (a tokenizer that adds BOS itself, a prompt that already carries it), ``name`` fields and
multi-part text content, thinking switches in ``chat_template_kwargs`` against the server's
defaults, ``add_generation_prompt`` given in ``chat_template_kwargs``, decoding with special tokens
and ``spaces_between_special_tokens``, and token ids at the vocabulary's edge.

Fixed here: ``chat_template_kwargs: {"add_generation_prompt": false}`` (and
``continue_final_message``) was ignored by the built-in encoder, so the prompt still opened an
assistant turn and ``/tokenize`` counted it, and under ``--chat-template`` it reached
``apply_chat_template`` a second time (a TypeError, served as a 400); the keys now set the
request's own fields, as vLLM's kwargs win over them, and a non-boolean value is a 400 naming
``chat_template_kwargs`` (mlcommons/endpoints#441, Luce-Org/lucebox#103). The other reports
passed as-is; their tests are regression guards.

The routes run in process over the fake tokenizer manager of ``openai_fake_tm``; the prompt is
read back from the engine request it receives. Oracles: DeepSeek's own converter and V4 encoder
(``deepseek-recipe``), transformers' tokenizer (``encode`` / ``decode``) on the same files, and the
reports' stated expected values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from tokenizer_testutil import BOS, EOS, tiny_tokenizer_json
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from detokenizer_testutil import stream_detok  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
A = "<｜Assistant｜>"


def _served(tok: Any, body: dict[str, Any], **args: Any) -> tuple[list[int], dict[str, Any]]:
    """The prompt ids the chat ``body`` sends to the engine and the response JSON (HTTP 200), on
    a fresh fake manager; ``args`` override the server arguments."""
    tm = FakeTM(tok)
    r = _client(tm, **args).post(CHAT, json={"model": MODEL, "messages": HI, "max_tokens": 4, **body})
    assert r.status_code == 200, r.text
    (req,) = tm.received
    ids = list(req.input_ids) if req.input_ids is not None else tok.encode(req.text, add_special_tokens=False)
    return ids, r.json()


def _prompt(tok: PreTrainedTokenizerFast, body: dict[str, Any], **args: Any) -> str:
    ids, _ = _served(tok, body, **args)
    return tok.decode(ids)


@pytest.fixture(scope="module")
def bos_adding_tok(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedTokenizerFast:
    """A small byte-level tokenizer of the V4 kind whose post-processor adds BOS to every
    encoding (as DeepSeek-V3's and Llama's ``tokenizer.json`` do), read by transformers."""
    from tokenizers import Tokenizer, processors

    path = Path(tmp_path_factory.mktemp("bos_tok")) / "tokenizer.json"
    tiny_tokenizer_json(path)
    t = Tokenizer.from_file(str(path))
    bos_id = t.token_to_id(BOS)
    t.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    t.save(str(path))
    return PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token=BOS, eos_token=EOS)


def test_llama_cpp_python_1439_chat_prompt_one_bos_with_a_bos_adding_tokenizer(
    bos_adding_tok: PreTrainedTokenizerFast,
) -> None:
    """abetlen/llama-cpp-python#1439, vllm-project/vllm#5278 and huggingface/transformers#36064:
    a rendered chat prompt (which carries its BOS as text) was tokenized with the tokenizer's
    special tokens added, so a tokenizer that adds BOS itself gave two. Right: a rendered chat
    prompt is tokenized without adding special tokens (transformers' ``apply_chat_template``
    contract), on the chat route and on ``/tokenize`` with ``messages``; a plain ``/tokenize``
    prompt still gets the tokenizer's BOS. Oracle: transformers' ``encode`` on the same file."""
    tok = bos_adding_tok
    bos = tok.convert_tokens_to_ids(BOS)
    assert tok.encode("Hi")[0] == bos  # the fixture's tokenizer does add BOS
    ids, _ = _served(tok, {})
    assert ids[0] == bos and ids.count(bos) == 1
    c = _client(FakeTM(tok))
    r = c.post("/tokenize", json={"messages": HI, "add_special_tokens": True})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == ids
    r = c.post("/tokenize", json={"prompt": "Hi"})
    assert r.json()["tokens"] == tok.encode("Hi")
    r = c.post("/tokenize", json={"prompt": "Hi", "add_special_tokens": False})
    assert r.json()["tokens"] == tok.encode("Hi", add_special_tokens=False)


def test_open_r1_462_prompt_text_with_bos_keeps_one(tok: PreTrainedTokenizerFast) -> None:
    """huggingface/open-r1#462 and twinnydotdev/twinny#314: a prompt already starting with the
    BOS text (a client's own ``apply_chat_template``) was given a second BOS. Right: the
    DeepSeek-V4 tokenizer adds none, so the text's own BOS is the only one; the count is the
    tokenizer's. Oracle: transformers' ``encode`` of the text."""
    bos = tok.convert_tokens_to_ids(BOS)
    text = BOS + "<｜User｜>Hi" + A + "</think>"
    r = _client(FakeTM(tok)).post("/tokenize", json={"prompt": text})
    assert r.status_code == 200, r.text
    want = tok.encode(text)
    assert r.json()["tokens"] == want and r.json()["count"] == len(want)
    assert want.count(bos) == 1 and want[0] == bos


def test_unsloth_10937_name_field_on_every_message(tok: PreTrainedTokenizerFast) -> None:
    """unslothai/unsloth#10937: chat messages with OpenAI's ``name`` field (sent by the openai
    SDK, LangChain, AutoGen) were refused with a 400. Right: a ``name`` on any role is accepted
    and the prompt is what DeepSeek's own converter renders for the same messages. Oracle:
    ``deepseek-recipe``."""
    msgs = [
        {"role": "system", "content": "Be brief.", "name": "ops"},
        {"role": "user", "content": "Hi", "name": "alice"},
        {"role": "assistant", "content": "Hello.", "name": "bot"},
        {"role": "user", "content": "Again", "name": "bob"},
    ]
    assert _prompt(tok, {"messages": msgs}) == recipe_prompt({"messages": msgs}, False)


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_mlx_vlm_1137_every_text_part_kept_and_joined(tok: PreTrainedTokenizerFast, role: str) -> None:
    """Blaizzy/mlx-vlm#1137 (only the last of several text parts reached the prompt),
    unslothai/unsloth#6480 and cloudwego/eino-ext#794 (parts joined with the wrong separator):
    every text part is kept, in order, joined as DeepSeek's own converter joins them. Oracle:
    ``deepseek-recipe``."""
    parts = [
        {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
        {"type": "text", "text": "Test!"},
    ]
    msgs: list[dict[str, Any]] = [{"role": role, "content": parts}]
    if role != "user":
        msgs = [*msgs, {"role": "user", "content": "Go"}] if role == "system" else [*HI, *msgs, *HI]
    got = _prompt(tok, {"messages": msgs})
    assert got == recipe_prompt({"messages": msgs}, False)
    assert got.index("<system-reminder>ctx") < got.index("Test!")


@pytest.mark.parametrize(
    ("default", "request_kwargs", "thinking"),
    [
        ({"thinking": False}, {"enable_thinking": True}, True),
        ({"thinking": True}, {"enable_thinking": False}, False),
        ({"enable_thinking": False}, {"thinking": True}, True),
        ({"thinking": False}, {}, False),
    ],
)
def test_vllm_ascend_8962_request_switch_beats_server_default(
    tok: PreTrainedTokenizerFast, default: dict[str, Any], request_kwargs: dict[str, Any], thinking: bool
) -> None:
    """vllm-project/vllm-ascend#8962: on DeepSeek-V4, a request's ``chat_template_kwargs``
    ``{"enable_thinking": true}`` did not override ``--default-chat-template-kwargs
    '{"thinking": false}'``. Right: request-level kwargs always win over the server's defaults,
    whichever of the two switch names each side uses; without one the default holds. Oracle:
    DeepSeek's encoder with thinking on / off."""
    body = {"chat_template_kwargs": request_kwargs} if request_kwargs else {}
    got = _prompt(tok, body, default_chat_template_kwargs=default)
    assert got == recipe_prompt({"messages": HI}, thinking)


def test_sglang_9898_thinking_switches_per_request(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#9898 (DeepSeek-V3.1 could not be switched between thinking and
    non-thinking per request) and sgl-project/sglang#5551 (``enable_thinking`` as the switch):
    alternating requests on one server each render their own mode. Oracle: DeepSeek's encoder."""
    tm = FakeTM(tok)
    c = _client(tm)
    modes = [True, False, True, False]
    for i, on in enumerate(modes):
        key = "enable_thinking" if i % 2 else "thinking"
        body = {"model": MODEL, "messages": HI, "max_tokens": 2, "chat_template_kwargs": {key: on}}
        assert c.post(CHAT, json=body).status_code == 200
    got = [tok.decode(r.input_ids) for r in tm.received]
    assert got == [recipe_prompt({"messages": HI}, on) for on in modes]


@pytest.mark.parametrize("where", ["field", "chat_template_kwargs"])
def test_mlcommons_endpoints_441_add_generation_prompt_in_template_kwargs(
    tok: PreTrainedTokenizerFast, where: str
) -> None:
    """mlcommons/endpoints#441 (a request sent ``chat_template_kwargs={"add_generation_prompt":
    false}``, and its count was taken with the generation prompt added) and Luce-Org/lucebox#103
    (that key collided with the server's own argument): ``add_generation_prompt`` is read from
    the top-level field or from ``chat_template_kwargs`` (vLLM's kwargs override the field), the
    prompt then ends with the user's text, and ``/tokenize`` counts the same prompt as the
    chat usage. Oracle: DeepSeek's encoder with the generation prompt (``<｜Assistant｜>`` and
    the mode token) cut off; transformers' ``encode`` for the count."""
    body: dict[str, Any] = (
        {"add_generation_prompt": False}
        if where == "field"
        else {"chat_template_kwargs": {"add_generation_prompt": False}}
    )
    full = recipe_prompt({"messages": HI}, False)
    want = full[: full.rindex(A)]
    ids, resp = _served(tok, body)
    assert tok.decode(ids) == want
    assert resp["usage"]["prompt_tokens"] == len(tok.encode(want, add_special_tokens=False))
    count = _client(FakeTM(tok)).post("/tokenize", json={"messages": HI, **body}).json()["count"]
    assert count == resp["usage"]["prompt_tokens"]


def test_lucebox_103_prompt_switch_kwargs_of_the_wrong_type_are_a_400(tok: PreTrainedTokenizerFast) -> None:
    """Luce-Org/lucebox#103: a ``chat_template_kwargs`` key that is also the server's own
    template argument crashed the request. Right: ``continue_final_message`` in the kwargs
    continues the final assistant message like the field, and a non-boolean value of either key
    is a 400 naming ``chat_template_kwargs``, as the ``openai`` client reads it. Oracle:
    transformers' ``continue_final_message`` rule (the cold prompt cut after the final text)."""
    prefix = "The capital is"
    msgs = [*HI, {"role": "assistant", "content": prefix}]
    cold = _prompt(tok, {"messages": msgs})
    got = _prompt(tok, {"messages": msgs, "chat_template_kwargs": {"continue_final_message": True}})
    assert got == cold[: cold.rindex(prefix) + len(prefix)]
    oai = _oai(_client(FakeTM(tok)))
    for bad in ({"add_generation_prompt": "no"}, {"continue_final_message": 1}):
        with pytest.raises(_openai().BadRequestError) as e:
            oai.chat.completions.create(
                model=MODEL, messages=HI, max_tokens=2, extra_body={"chat_template_kwargs": bad}
            )
        assert e.value.status_code == 400 and e.value.body["param"] == "chat_template_kwargs"
        assert next(iter(bad)) in e.value.message


def _openai() -> Any:
    import openai

    return openai


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("spaces", [False, True])
def test_mlx_examples_1077_decoding_special_tokens(
    tok: PreTrainedTokenizerFast, fast: Any, skip: bool, spaces: bool
) -> None:
    """ml-explore/mlx-examples#1077 (streaming detokenization crashed with ``KeyError: '｜'`` on
    DeepSeek's ``<｜end▁of▁sentence｜>``), huggingface/transformers#19293 and
    huggingface/tokenizers#1095 (spaces inserted around added tokens on decode): the streamed
    text of ids holding DeepSeek's special tokens is what the tokenizer decodes, whole and
    piece by piece, with ``spaces_between_special_tokens`` either way (a byte-level fast
    tokenizer inserts none). Oracle: transformers' ``decode`` with the same ``skip_special_tokens``."""
    ids = [
        *tok.encode("Hi there", add_special_tokens=False),
        tok.convert_tokens_to_ids("<｜User｜>"),
        tok.convert_tokens_to_ids(EOS),
        *tok.encode(" ok 你好", add_special_tokens=False),
        tok.convert_tokens_to_ids(EOS),
    ]
    want = tok.decode(ids, skip_special_tokens=skip)
    for per in (1, 2, len(ids)):
        chunks, final = stream_detok(
            fast, ids, skip=skip, per_message=per, spaces_between_special_tokens=spaces
        )
        assert final == want and "".join(chunks) == want


@pytest.mark.parametrize("route", ["/v1/completions", "/detokenize"])
def test_dynamo_12798_token_ids_at_the_vocabulary_edge(tok: PreTrainedTokenizerFast, route: str) -> None:
    """ai-dynamo/dynamo#12798: pre-tokenized ids were not checked against the vocabulary, so an
    out-of-range id reached the engine. Right: the last id of the vocabulary is served, the
    first one past it (and a negative one) is a 400 naming the field, OpenAI's error shape.
    Oracle: the tokenizer's vocabulary size (``len(tok)``) and its ``decode``."""
    c = _client(FakeTM(tok))
    field = "prompt" if route == "/v1/completions" else "tokens"
    extra = {"model": MODEL, "max_tokens": 1} if field == "prompt" else {}
    last = len(tok) - 1
    r = c.post(route, json={field: [last], **extra})
    assert r.status_code == 200, r.text
    if field == "tokens":
        assert r.json()["text"] == tok.decode([last], skip_special_tokens=True)
    for bad in (len(tok), -1):
        r = c.post(route, json={field: [5, bad], **extra})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == field and r.json()["error"]["type"] == "BadRequestError"


def test_lucebox_103_template_kwargs_key_of_a_jinja_template(tmp_path: Path) -> None:
    """Luce-Org/lucebox#103: under a Jinja ``--chat-template``, ``chat_template_kwargs`` holding
    ``add_generation_prompt`` reached ``apply_chat_template`` beside the server's own argument
    (a TypeError, the request refused). Right: the key is the request's switch and the template
    renders once with it. Oracle: transformers' ``apply_chat_template`` with
    ``add_generation_prompt=False`` on the same files and template."""
    import json
    import shutil

    from server_fixture import tokenizer_source_dir
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from transformers import AutoTokenizer

    d = tmp_path / "m"
    d.mkdir()
    configs = Path(__file__).parent / "fixtures" / "configs"
    shutil.copy(configs / "tiny-DeepseekV4ForCausalLM.config.json", d / "config.json")
    tiny_tokenizer_json(d / "tokenizer.json")
    shutil.copy(Path(tokenizer_source_dir()) / "tokenizer_config.json", d / "tokenizer_config.json")
    body = (
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    ref = AutoTokenizer.from_pretrained(str(d))
    tm = FakeTM(get_tokenizer(str(d)))
    c = _client(tm, chat_template=body, tokenizer_path=str(d), model_path=str(d))
    for kwargs, agp in (({"add_generation_prompt": False}, False), ({"thinking": False}, True)):
        r = c.post(
            CHAT, json={"model": MODEL, "messages": HI, "max_tokens": 2, "chat_template_kwargs": kwargs}
        )
        assert r.status_code == 200, r.text
        want = ref.apply_chat_template(HI, chat_template=body, tokenize=True, add_generation_prompt=agp)
        assert tm.received[-1].input_ids == list(getattr(want, "input_ids", want)), json.dumps(kwargs)
