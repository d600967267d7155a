"""Inputs that were taken without a check: a ``--radix-eviction-policy`` SGLang's parser refuses,
a safetensors index naming a shard outside the model directory, ``/v1/responses`` values outside
OpenAI's ``text.verbosity`` enum or ``safety_identifier`` length.

Oracles: SGLang 0.5.23's own argparse (``sglang`` installed), the ``openai`` client's types and
docs (``ResponseTextConfig.verbosity``, ``ResponseCreateParams.safety_identifier``) and its error
classes, and the file system (where the index entry points).
"""

from __future__ import annotations

import argparse
import json
import typing
from pathlib import Path

import openai
import pytest
import torch
from fake_prompt_tm import MODEL, PromptTM
from openai.types.responses import ResponseTextConfig
from responses_testutil import make_client
from safetensors.torch import save_file
from sglang_v4.model_loader.loader import checkpoint_files
from sglang_v4.server_args import ServerArgs
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

INDEX = "model.safetensors.index.json"


# --------------------------------------------------------------------------- --radix-eviction-policy
def _exit_code(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


@pytest.mark.parametrize("value", ["lru", "lfu", "slru", "priority", "tlru", "LRU", "fifo", "random", ""])
def test_radix_eviction_policy_takes_sglangs_choices_only(value: str, capsys) -> None:
    """SGLang's parser takes ``--radix-eviction-policy`` from its documented choices only and exits
    2 otherwise; ours exits with the same code for the same value (it used to take any)."""
    sglang_server_args = pytest.importorskip("sglang.srt.server_args")
    theirs = argparse.ArgumentParser()
    sglang_server_args.ServerArgs.add_cli_args(theirs)
    ours = argparse.ArgumentParser()
    ServerArgs.add_cli_args(ours)
    expected = _exit_code(theirs, ["--model-path", "m", "--radix-eviction-policy", value])
    assert _exit_code(ours, ["--device", "cpu", "--radix-eviction-policy", value]) == expected
    if expected:
        assert "--radix-eviction-policy" in capsys.readouterr().err


# --------------------------------------------------------------------------- checkpoint index
def _model_dir(tmp_path: Path, entry: str) -> Path:
    """A model directory whose index sends ``w`` to ``entry``, and a valid shard ``outside.safetensors``
    next to (not in) it."""
    d = tmp_path / "model"
    d.mkdir()
    save_file({"w": torch.zeros(2)}, tmp_path / "outside.safetensors")
    save_file({"v": torch.zeros(2)}, d / "model-00001-of-00001.safetensors")
    weight_map = {"v": "model-00001-of-00001.safetensors", "w": entry}
    (d / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return d


@pytest.mark.parametrize("kind", ["parent", "absolute", "nested_parent"])
def test_index_entry_outside_the_model_directory_is_refused(tmp_path: Path, kind: str) -> None:
    """``"../outside.safetensors"`` (or its absolute path, or ``sub/../../outside...``) names a
    file that exists outside the model directory; it used to be opened as a shard. Expected: one
    line naming the index, the tensor and the entry."""
    outside = tmp_path / "outside.safetensors"
    entry = {
        "parent": "../outside.safetensors",
        "absolute": str(outside),
        "nested_parent": "sub/../../outside.safetensors",
    }[kind]
    d = _model_dir(tmp_path, entry)
    assert (d / entry).resolve() == outside.resolve() and outside.is_file()  # it would be read
    with pytest.raises(ValueError) as e:
        checkpoint_files(str(d))
    msg = str(e.value)
    assert "\n" not in msg and str(d / INDEX) in msg and repr(entry) in msg and " w " in msg
    assert "outside the model directory" in msg


def test_index_entries_that_stay_inside_or_link_out_are_taken(tmp_path: Path) -> None:
    """The name is checked, not where it resolves: a Hugging Face cache snapshot's shards are
    links into ``../../blobs``."""
    d = _model_dir(tmp_path, "linked.safetensors")
    (d / "linked.safetensors").symlink_to(tmp_path / "outside.safetensors")
    files = checkpoint_files(str(d))
    assert [Path(f).resolve() for f in files] == [
        (d / "model-00001-of-00001.safetensors").resolve(),
        (tmp_path / "outside.safetensors").resolve(),
    ]


# --------------------------------------------------------------------------- /v1/responses
VERBOSITY = typing.get_args(typing.get_args(ResponseTextConfig.model_fields["verbosity"].annotation)[0])


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/responses/input_tokens"])
def test_text_verbosity_outside_openais_values_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, route: str
) -> None:
    """OpenAI's ``text.verbosity`` is one of ``low`` / ``medium`` / ``high`` (the client's type);
    any other value used to be taken. Expected: the client's values pass, others are a 400 with
    ``param: "text.verbosity"``."""
    assert set(VERBOSITY) == {"low", "medium", "high"}
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    for v in VERBOSITY:
        r = tc.post(route, json={"model": MODEL, "input": "hi", "text": {"verbosity": v}})
        assert r.status_code == 200, r.text
    for bad in ("loud", "LOW", "", 3):
        r = tc.post(route, json={"model": MODEL, "input": "hi", "text": {"verbosity": bad}})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "text.verbosity", r.text
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", text={"verbosity": "loud"})  # type: ignore[typeddict-item]
    assert e.value.param == "text.verbosity"


@pytest.mark.parametrize("route", ["/v1/responses", "/v1/responses/input_tokens"])
def test_safety_identifier_over_128_characters_is_a_400_naming_it(
    tok: PreTrainedTokenizerFast, route: str
) -> None:
    """The ``openai`` client documents ``safety_identifier`` as at most 128 characters; a longer
    one used to be taken (and echoed). Expected: 128 passes, 129 is a 400 naming the field."""
    tm = PromptTM(tok, reply="Hi.")
    client, tc = make_client(tm)
    r = tc.post(route, json={"model": MODEL, "input": "hi", "safety_identifier": "u" * 128})
    assert r.status_code == 200, r.text
    r = tc.post(route, json={"model": MODEL, "input": "hi", "safety_identifier": "u" * 129})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "safety_identifier"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", safety_identifier="é" * 129)
    assert e.value.param == "safety_identifier"
