"""Loading a model directory's tokenizer: :class:`FastTokenizer` (``tokenizers`` only) over the
Hugging Face tokenizer files read as transformers 5 reads them, :func:`get_tokenizer` (the one
entry the runtime processes use), and byte-level BPE helpers. SGLang's module of the same name
holds its ``get_tokenizer``.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)


#: transformers' named special tokens (``SPECIAL_TOKENS_ATTRIBUTES``), in its order.
SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
#: The tokenizer files of a Hugging Face model directory (transformers' names).
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
#: ``model_max_length`` of a tokenizer whose config sets none (transformers' ``VERY_LARGE_INTEGER``).
NO_MAX_LENGTH = int(1e30)


@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's): the character that stands for each byte value.
    Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
    are shifted to U+0100 onwards in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars: dict[str, int] = {chr(b): b for b in printable}
    shift = 0
    for b in range(256):
        if b not in printable:
            chars[chr(0x100 + shift)] = b
            shift += 1
    return chars


def byte_level_token_bytes(tokenizer: Any, tid: int) -> bytes | None:
    """The raw bytes of token ``tid`` of a byte-level BPE vocabulary, or ``None`` when the token's
    piece is not spelled in the byte-level alphabet (an added token, another tokenizer kind)."""
    if tokenizer is None:
        return None
    try:
        piece = tokenizer.convert_ids_to_tokens(int(tid))
    except Exception:  # noqa: BLE001 - an id outside the vocabulary: no raw bytes
        return None
    if not isinstance(piece, str) or not piece:
        return None
    alphabet = _byte_level_alphabet()
    if any(c not in alphabet for c in piece):
        return None
    return bytes(alphabet[c] for c in piece)


def _byte_level_max_chars_per_token(tok: Any) -> int | None:
    """See :attr:`FastTokenizer.max_chars_per_token` (``tok``: a ``tokenizers.Tokenizer``)."""
    import json

    try:
        spec = json.loads(tok.to_str())
    except Exception:  # noqa: BLE001 - an unreadable spec means "unknown"
        return None
    norm = spec.get("normalizer")
    if norm is not None and not (norm.get("type") == "Sequence" and not norm.get("normalizers")):
        return None  # a normalizer may shrink or drop characters
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or "ByteLevel" not in json.dumps(spec.get("pre_tokenizer")):
        return None
    longest = max((len(t) for t in tok.get_vocab(with_added_tokens=False)), default=0)
    for added in tok.get_added_tokens_decoder().values():
        if added.lstrip or added.rstrip:
            return None  # it also takes the whitespace around it, of any length
        longest = max(longest, len(added.content))
    return longest or None


class FastTokenizer:
    """A light HF-compatible tokenizer on ``tokenizers.Tokenizer`` (no ``transformers`` import).

    Loads ``tokenizer.json`` and the tokenizer files beside it as transformers 5 reads them
    (:func:`load_tokenizer_config`): the named special tokens (``tokenizer_config.json``, or the
    legacy ``special_tokens_map.json``; a token given as a string or as an ``AddedToken`` dict),
    ``added_tokens_decoder`` entries and special tokens missing from ``tokenizer.json`` (added after
    its vocabulary, in transformers' order: :meth:`_add_missing_tokens`), and the chat template(s)
    (``chat_template.jinja`` / ``additional_chat_templates/`` win; a list of named templates becomes
    ``{name: template}``). The special tokens ``encode`` adds are those of ``tokenizer.json``'s
    post-processor: transformers 5 drops ``tokenizer_config.json``'s ``add_bos_token`` /
    ``add_eos_token`` whenever a ``tokenizer.json`` exists (``PreTrainedTokenizerBase._from_pretrained``).
    ``tokenizer_class`` is not read (transformers 5.22 on load a byte-level ``tokenizer.json`` the
    same way whatever class it names; 5.17 to 5.21 let a ``Llama*`` class replace its pre-tokenizer
    and decoder by SentencePiece's, which drops spaces from the ids: huggingface/transformers#45488).
    Implements the subset of the ``transformers`` tokenizer API the runtime
    uses: ``encode``, ``decode``, ``batch_decode``, ``convert_ids_to_tokens``,
    ``convert_tokens_to_ids``, ``len()``, ``vocab_size``, ``bos/eos/pad/unk_token(_id)``,
    ``all_special_ids``, ``chat_template``, ``model_max_length``. ``test_server_tokenizer.py`` and
    ``test_tokenizer_files_variants.py`` check it against ``transformers.AutoTokenizer`` on the same files.

    Raises:
        ValueError: a tokenizer file is not a JSON object (names the file); a named special token
            (``eos_token``, ``bos_token``, ...) that is neither a string nor an ``AddedToken``
            object with a string ``content`` (a list, a number, ``true``), or an
            ``extra_special_tokens`` / ``additional_special_tokens`` that is not a list (or an
            object) of such tokens, which transformers refuses too (``TypeError``): read as no
            token, it would silently drop the tokenizer's EOS from the stop ids, or a special
            token from the ones ``decode`` skips (names the key).
    """

    def __init__(self, path: str) -> None:
        import tokenizers

        self.name_or_path = path
        self._tok = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        cfg = load_tokenizer_config(path)
        for key in SPECIAL_TOKEN_KEYS:
            value = cfg.get(key)
            if value is not None and _added_token(value) is None:
                raise ValueError(
                    f"{path}: {TOKENIZER_CONFIG_FILE} / {SPECIAL_TOKENS_MAP_FILE}: {key} must be a string or an "
                    f'AddedToken object ({{"content": "..."}}), got {type(value).__name__} {value!r}'
                )
        named = {k: _added_token(cfg.get(k)) for k in SPECIAL_TOKEN_KEYS}
        extra_cfg = cfg.get("extra_special_tokens") or []
        if isinstance(extra_cfg, dict):  # model-specific named tokens ({"image_token": ...})
            extra_cfg = list(extra_cfg.values())
        if not isinstance(extra_cfg, list) or any(_added_token(t) is None for t in extra_cfg):
            raise ValueError(
                f"{path}: {TOKENIZER_CONFIG_FILE} / {SPECIAL_TOKENS_MAP_FILE}: extra_special_tokens "
                f"(additional_special_tokens) must be a list of strings or AddedToken objects, or an "
                f"object of named ones, got {cfg.get('extra_special_tokens')!r}"
            )
        extra = [_added_token(t) for t in extra_cfg]
        decoder = cfg.get("added_tokens_decoder")
        self._add_missing_tokens(named, extra, decoder if isinstance(decoder, dict) else {})
        self._register_named_special_tokens(named)
        contents = {k: _token_content(v) for k, v in named.items()}
        self.bos_token = contents["bos_token"]
        self.eos_token = contents["eos_token"]
        self.pad_token = contents["pad_token"]
        self.unk_token = contents["unk_token"]
        self.bos_token_id = self._token_id(self.bos_token)
        self.eos_token_id = self._token_id(self.eos_token)
        self.pad_token_id = self._token_id(self.pad_token)
        self.unk_token_id = self._token_id(self.unk_token)
        self.clean_up_tokenization_spaces = bool(cfg.get("clean_up_tokenization_spaces", False))
        self.chat_template: str | dict[str, str] | None = cfg.get("chat_template")
        # transformers reads null (and no key) as "no limit"; a limit is never applied here (the
        # context length is the model's, SGLang's rule), so any number, 1e30 included, is kept
        mml = cfg.get("model_max_length")
        try:
            self.model_max_length = (
                int(mml) if mml is not None and not isinstance(mml, bool) else NO_MAX_LENGTH
            )
        except (TypeError, ValueError, OverflowError):  # a string, NaN, Infinity
            self.model_max_length = NO_MAX_LENGTH
        specials = [*contents.values(), *map(_token_content, extra)]
        self.all_special_ids = sorted({i for t in specials if (i := self._token_id(t)) is not None})
        self._max_chars_per_token: int | None = 0  # 0: not computed yet

    def _token_id(self, token: str | None) -> int | None:
        return self._tok.token_to_id(token) if token else None

    def _add_missing_tokens(self, named: dict[str, Any], extra: list[Any], decoder: dict[str, Any]) -> None:
        """Add the tokens transformers 5 adds after loading ``tokenizer.json``
        (``TokenizersBackend.__init__``), in its order, so that ids and splits agree: the
        ``added_tokens_decoder`` entries (by id) that ``tokenizer.json`` does not hold with the same
        flags, then the named special tokens and the extra special tokens that are not added tokens
        yet. Each new token takes the next free id (transformers ignores a gap in the declared ids);
        a string, or a named token's content, is added as a special token."""
        import tokenizers

        existing = self._tok.get_added_tokens_decoder().values()
        known = {repr(t) for t in existing}
        to_add: list[Any] = []
        for key in sorted(decoder, key=_int_key):
            tok = _added_token(decoder[key]) if isinstance(decoder[key], dict) else None
            if tok is not None and repr(tok) not in known:
                to_add.append(tok)
        have = {t.content for t in existing} | {t.content for t in to_add}
        for tok in (*named.values(), *extra):
            content = _token_content(tok)
            if content is not None and content not in have:
                to_add.append(tok)
                have.add(content)
        if not to_add:
            return
        named_contents = {_token_content(t) for t in named.values()} - {None}
        final = []
        for tok in to_add:
            if isinstance(tok, str):
                tok = tokenizers.AddedToken(tok, special=True)
            elif not tok.special and tok.content in named_contents:
                tok.special = True
            final.append(tok)
        self._tok.add_tokens(final)

    def _register_named_special_tokens(self, named: dict[str, Any]) -> None:
        """Register the named special tokens (``bos_token``, ``eos_token``, ...) with ``tokenizers``
        as special, as transformers 5 does once loaded (``TokenizersBackend._post_init``): a token that
        ``tokenizer.json`` holds as a non-special added token (or as a vocabulary token) becomes
        special, so ``decode(skip_special_tokens=True)`` drops it as transformers does (an EOS
        named in ``tokenizer_config.json`` but not flagged special in ``tokenizer.json`` would
        otherwise stay in the output text). A string is registered as transformers registers
        it: not normalized. The extra special tokens keep their ``tokenizer.json`` flags, as
        there (transformers 5.25 decodes a non-special one even with ``skip_special_tokens``)."""
        import tokenizers

        tokens = []
        for tok in named.values():
            if isinstance(tok, str):
                tokens.append(tokenizers.AddedToken(tok, special=True, normalized=False))
            elif tok is not None and _token_content(tok) is not None:
                tokens.append(tok)
        if tokens:
            self._tok.add_special_tokens(tokens)

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @property
    def vocab_size(self) -> int:
        """Base vocabulary size without added tokens (HF's ``vocab_size``)."""
        return int(self._tok.get_vocab_size(with_added_tokens=False))

    def encode(self, text: str, add_special_tokens: bool = True, **_: Any) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens``, those ``tokenizer.json``'s post-processor
        adds (none for the DeepSeek-V4 tokenizer, whose prompts carry their BOS as text).

        Runs ``tokenizers``' ``encode_batch_fast`` (tokenizers >= 0.21) where it exists: the same
        ids without the character offsets, which cost about a fifth of the call and are never
        read here (a 2k-token prompt: ~2.3 ms instead of ~2.9 ms on a slow CPU core); it also
        releases the GIL. Older releases run ``encode``."""
        fast = getattr(self._tok, "encode_batch_fast", None)
        if fast is not None:
            return list(fast([text], add_special_tokens=add_special_tokens)[0].ids)
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_releasing_gil(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """:meth:`encode` with the GIL released while the Rust tokenizer runs (same ids).

        ``tokenizers.Tokenizer.encode`` holds the GIL for the whole call (seconds for a prompt of
        millions of characters); ``encode_batch`` releases it, so running this in a worker thread
        leaves the event loop free (``encode_batch_fast`` where it exists: see :meth:`encode`).
        """
        batch = getattr(self._tok, "encode_batch_fast", None) or self._tok.encode_batch
        return list(batch([text], add_special_tokens=add_special_tokens)[0].ids)

    @property
    def max_chars_per_token(self) -> int | None:
        """The most characters of input text one token can stand for, or ``None`` when unknown.

        Known for a byte-level BPE without a normalizer (the DeepSeek tokenizers): a vocabulary
        token of ``k`` byte-level symbols covers ``k`` UTF-8 bytes, hence at most ``k`` characters,
        and an added (special) token covers its literal content. So a text of ``c`` characters has
        at least ``ceil(c / max_chars_per_token)`` tokens. Unknown when an added token has
        ``lstrip`` / ``rstrip`` (it also covers the whitespace run beside it, of any length).
        """
        if self._max_chars_per_token == 0:
            self._max_chars_per_token = _byte_level_max_chars_per_token(self._tok)
        return self._max_chars_per_token

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens=add_special_tokens)}

    def decode(self, ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        """Text of ``ids`` (an int or a list of ints). Other keyword arguments are accepted and
        ignored, as transformers' fast tokenizers ignore them (``spaces_between_special_tokens``
        among them: a ``tokenizers`` decoder places no space around added tokens)."""
        if isinstance(ids, int):
            ids = [ids]
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, batch: list[list[int]], skip_special_tokens: bool = False, **_: Any) -> list[str]:
        """Texts of several id lists."""
        return list(self._tok.decode_batch([list(b) for b in batch], skip_special_tokens=skip_special_tokens))

    def convert_ids_to_tokens(self, ids: Any) -> Any:
        """Vocabulary token of an id, or the tokens of a list of ids (``None`` for an unknown id)."""
        if isinstance(ids, int):
            return self._tok.id_to_token(ids)
        return [self._tok.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        """Id of a vocabulary token, or the ids of a list of tokens (``None`` for an unknown token)."""
        if isinstance(tokens, str):
            return self._tok.token_to_id(tokens)
        return [self._tok.token_to_id(t) for t in tokens]

    def get_vocab(self) -> dict[str, int]:
        """The vocabulary, added tokens included: ``{token: id}``."""
        return dict(self._tok.get_vocab(with_added_tokens=True))


def get_tokenizer(path: str) -> Any:
    """Load the model's tokenizer from a HF-layout directory.

    ``tokenizer.json`` present: a :class:`FastTokenizer` (fast to import; same ids and text as
    ``transformers``). Otherwise (or when it fails on the file) :func:`load_transformers_tokenizer`.

    Raises:
        ValueError: the directory has no usable tokenizer (message names ``tokenizer_path``).
    """
    if os.path.exists(os.path.join(path, "tokenizer.json")):
        try:
            return FastTokenizer(path)
        except ValueError as e:
            if str(e).startswith("tokenizer_path:"):  # a broken tokenizer file: transformers fails too
                raise
            logger.warning("FastTokenizer failed on %s (%s); using transformers", path, e)
        except Exception as e:  # noqa: BLE001 - fall back to transformers
            logger.warning("FastTokenizer failed on %s (%s); using transformers", path, e)
    try:
        return load_transformers_tokenizer(path)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"tokenizer_path: cannot load a tokenizer from {path!r}: {e}") from None


def _pipeline_kinds(part: Any) -> Any:
    """The component type(s) of a serialized ``tokenizers`` pre-tokenizer or decoder (a JSON
    object, or ``None``): its ``"type"``, or for a ``Sequence`` the tuple of its members' kinds."""
    if not isinstance(part, dict):
        return None
    members = part.get("pretokenizers", part.get("decoders"))
    if part.get("type") == "Sequence" and isinstance(members, list):
        return tuple(_pipeline_kinds(m) for m in members)
    return part.get("type")


def _has_byte_level(kinds: Any) -> bool:
    """``kinds`` (from :func:`_pipeline_kinds`) is or contains ``ByteLevel``."""
    return kinds == "ByteLevel" or (isinstance(kinds, tuple) and any(_has_byte_level(k) for k in kinds))


def load_transformers_tokenizer(path: str, **kwargs: Any) -> Any:
    """``transformers.AutoTokenizer.from_pretrained(path, **kwargs)``, reading a byte-level
    ``tokenizer.json`` as it is on every transformers 5 release.

    transformers 5.17 to 5.21 rebuild the pipeline of a directory whose ``tokenizer_config.json``
    names a ``Llama*`` class (as DeepSeek-V3's does): the file's ``ByteLevel`` pre-tokenizer and
    decoder become SentencePiece's ``Metaspace``, so spaces and CJK text vanish from the ids
    (huggingface/transformers#45488; 5.22 on keep the file's). When ``path`` is a directory whose
    ``tokenizer.json`` has a ``ByteLevel`` pre-tokenizer or decoder and the loaded tokenizer's
    differ from the file's, the directory is read again with
    ``transformers.PreTrainedTokenizerFast.from_pretrained(path, **kwargs)`` (the same files and
    ``tokenizer_config.json`` without the class's rebuild: what ``AutoTokenizer`` gives from 5.22
    on). Other tokenizers (SentencePiece ones, Hub ids) are returned as ``AutoTokenizer`` reads them.

    Raises:
        Whatever ``from_pretrained`` raises for a directory it cannot read (``OSError``,
        ``ValueError``...); callers name the field.
    """
    import json

    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(path, **kwargs)
    file = os.path.join(path, "tokenizer.json")
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not os.path.isfile(file):
        return tok
    try:
        with open(file, encoding="utf-8") as f:
            spec = json.load(f)
        loaded = json.loads(backend.to_str())
    except (OSError, ValueError):
        return tok
    if not isinstance(spec, dict):
        return tok
    for part in ("pre_tokenizer", "decoder"):
        want = _pipeline_kinds(spec.get(part))
        if _has_byte_level(want) and _pipeline_kinds(loaded.get(part)) != want:
            logger.warning(
                "transformers %s replaced the %s of %s (huggingface/transformers#45488); reading the file as it is",
                transformers.__version__,
                part,
                file,
            )
            return transformers.PreTrainedTokenizerFast.from_pretrained(path, **kwargs)
    return tok


def _read_json_object(file: str) -> dict[str, Any]:
    """The JSON object of ``file``.

    Raises:
        ValueError: naming ``tokenizer_path`` and the file: not JSON, or not an object.
    """
    import json

    try:
        with open(file, encoding="utf-8-sig") as f:
            value = json.load(f)
    except ValueError as e:
        raise ValueError(f"tokenizer_path: {file} is not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"tokenizer_path: {file} is not a JSON object (got {type(value).__name__})")
    return value


def load_chat_templates(path: str, cfg: dict[str, Any]) -> str | dict[str, str] | None:
    """The chat template(s) of the tokenizer directory ``path`` as transformers 5 reads them
    (``PreTrainedTokenizerBase._from_pretrained`` / ``__init__``): ``chat_template.jinja`` (the
    ``"default"`` template) and ``additional_chat_templates/<name>.jinja`` replace
    ``tokenizer_config.json``'s ``chat_template`` (``cfg``); a lone default is a string, several
    templates a ``{name: template}`` dict, and the config's list of ``{"name", "template"}`` (the
    layout of models with a ``tool_use`` / ``rag`` template) becomes that dict too. A file's leading
    UTF-8 byte-order mark is skipped (transformers keeps it as a U+FEFF that starts every prompt).

    Returns:
        The template text, ``{name: text}``, or ``None`` when the directory has none.
    """
    files: dict[str, str] = {}
    default = os.path.join(path, CHAT_TEMPLATE_FILE)
    if os.path.isfile(default):
        with open(default, encoding="utf-8-sig") as f:
            files["default"] = f.read()
    extra_dir = os.path.join(path, CHAT_TEMPLATE_DIR)
    if os.path.isdir(extra_dir):
        for name in sorted(os.listdir(extra_dir)):
            if name.endswith(".jinja"):
                with open(os.path.join(extra_dir, name), encoding="utf-8-sig") as f:
                    files[name[: -len(".jinja")]] = f.read()
    if files:
        return files["default"] if list(files) == ["default"] else files
    value = cfg.get("chat_template")
    if isinstance(value, (list, tuple)):
        return {
            t["name"]: t["template"]
            for t in value
            if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)
        }
    return value if isinstance(value, (str, dict)) else None


def load_tokenizer_config(path: str) -> dict[str, Any]:
    """``tokenizer_config.json`` of the directory ``path`` (``{}`` without one) merged with the
    other tokenizer files as transformers 5's ``from_pretrained`` merges them: ``chat_template``
    from :func:`load_chat_templates`; ``additional_special_tokens`` renamed
    ``extra_special_tokens`` (unless that is set); and, only when the config has no
    ``added_tokens_decoder`` (the legacy layout), ``special_tokens_map.json``'s entries over the
    config's (an ``AddedToken`` dict there is a special token; its ``extra_special_tokens`` join
    the config's).

    Raises:
        ValueError: naming ``tokenizer_path`` and the file: a file that is not a JSON object.
    """
    cfg_file = os.path.join(path, TOKENIZER_CONFIG_FILE)
    cfg = _read_json_object(cfg_file) if os.path.isfile(cfg_file) else {}
    cfg["chat_template"] = load_chat_templates(path, cfg)
    _rename_additional_special_tokens(cfg)
    stm_file = os.path.join(path, SPECIAL_TOKENS_MAP_FILE)
    if "added_tokens_decoder" not in cfg and os.path.isfile(stm_file):
        for key, value in _read_json_object(stm_file).items():
            if key == "extra_special_tokens" and isinstance(value, list):
                merged = list(cfg.get("extra_special_tokens") or [])
                seen = {_token_content(_added_token(t)) for t in merged}
                merged += [t for t in value if _token_content(_added_token(t)) not in seen]
                value = merged
            elif isinstance(value, dict) and "content" in value:
                value = {**value, "special": True}
            cfg[key] = value
        _rename_additional_special_tokens(cfg)
    return cfg


def _rename_additional_special_tokens(cfg: dict[str, Any]) -> None:
    """transformers 5's rename of the deprecated ``additional_special_tokens`` (in place)."""
    if "additional_special_tokens" in cfg and not cfg.get("extra_special_tokens"):
        cfg["extra_special_tokens"] = cfg.pop("additional_special_tokens")


def _added_token(value: Any) -> Any:
    """A special-token entry of a tokenizer file as ``tokenizers.AddedToken`` (an ``AddedToken``
    dict, with or without its ``"__type"`` marker), the string itself, or ``None`` (no token)."""
    import tokenizers

    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = ("single_word", "lstrip", "rstrip", "normalized", "special")
        return tokenizers.AddedToken(value["content"], **{k: bool(value[k]) for k in flags if k in value})
    return None


def _token_content(token: Any) -> str | None:
    """The text of a token from :func:`_added_token` (``None`` for none or an empty one)."""
    content = token if isinstance(token, str) else getattr(token, "content", None)
    return content or None


def _int_key(key: Any) -> int:
    """An ``added_tokens_decoder`` key as its id (a non-number sorts last)."""
    try:
        return int(key)
    except (TypeError, ValueError):
        return 1 << 62
