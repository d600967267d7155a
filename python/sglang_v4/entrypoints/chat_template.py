"""``--chat-template``: what it may name, read and checked before any process loads the model.

Without the flag, chat prompts use the built-in DeepSeek-V4 encoding (``chat_encoding.py``),
whatever chat template the tokenizer directory carries (SGLang's rule for DeepSeek-V4
checkpoints). With it, prompts are rendered by transformers' ``apply_chat_template`` with a Jinja
template given as one of:

* a file path (the usual form, SGLang's and vLLM's);
* the template itself on the command line, as vLLM takes it: a value with ``{``, ``}`` or a
  newline that is not a file; backslash escapes (``\\n``) are decoded as vLLM decodes them, other
  characters kept;
* the name of one of the tokenizer's own templates (``tokenizer_config.json``'s list of
  ``{"name", "template"}``, ``additional_chat_templates/<name>.jinja``, ``default`` for
  ``chat_template.jinja``), as transformers' ``apply_chat_template(chat_template=name)`` resolves it.

A template file's leading UTF-8 byte-order mark is not part of the template (it would otherwise
start every prompt with U+FEFF); nor is one at the start of the tokenizer's ``.jinja`` files.

Refused with a message naming ``chat_template``: a path that does not exist, a JSON file (SGLang's
conversation-template format, which sglang-v4 does not implement: its text would otherwise be
rendered as the prompt), a template Jinja cannot compile, a name the tokenizer does not have
(SGLang's built-in conversation template names, ``chatml`` and the like, are not served).

The messages a template renders are prepared as SGLang and vLLM prepare them (content in the
template's format, tool-call arguments as mappings): :mod:`sglang_v4.entrypoints.chat_template_messages`.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: File name endings that make a ``--chat-template`` value a path even when no such file exists.
_PATH_SUFFIXES = (".jinja", ".jinja2", ".j2", ".json", ".txt", ".tmpl", ".tpl")


def looks_like_path(value: str) -> bool:
    """Whether ``--chat-template value`` can only mean a file (a separator or a template suffix)."""
    return "/" in value or os.sep in value or value.lower().endswith(_PATH_SUFFIXES)


def is_inline_template(value: str) -> bool:
    """vLLM's test for a template given on the command line: any of ``{``, ``}``, newline."""
    return any(c in value for c in "{}\n")


def compile_error(text: str) -> str | None:
    """Why Jinja cannot compile the chat template ``text`` (transformers' own environment: its
    extensions and filters), or ``None`` when it compiles."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template as compile_template
    except ImportError:  # another transformers layout: a plain sandboxed environment
        import jinja2.sandbox

        compile_template = jinja2.sandbox.ImmutableSandboxedEnvironment(
            extensions=["jinja2.ext.loopcontrols"]
        ).from_string
    try:
        compile_template(text)
    except Exception as e:  # noqa: BLE001 - jinja2's TemplateSyntaxError and friends
        return " ".join(str(e).split()) or type(e).__name__
    return None


def check_chat_template_arg(value: str) -> None:
    """The checks of ``--chat-template value`` that need no tokenizer (``ServerArgs``): a file
    must exist and hold a Jinja template that compiles, an inline template must compile; a name is
    checked against the tokenizer later (:func:`resolve_chat_template`).

    Raises:
        ValueError: naming ``chat_template``.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"chat_template must be a Jinja template file, a template or a template name (got {value!r})"
        )
    if os.path.isfile(value):
        _check_text(_read_template_file(value), repr(value))
    elif is_inline_template(value):
        _check_text(decode_inline_template(value), "the template given inline")
    elif looks_like_path(value):
        raise ValueError(f"chat_template must be a Jinja template file (no file {value!r})")


def decode_inline_template(value: str) -> str:
    """An inline template's text: backslash escapes decoded (vLLM's ``unicode_escape`` reading)
    without vLLM's Latin-1 mangling of other characters (``<｜User｜>`` stays as written)."""
    try:
        return value.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:  # a lone trailing backslash: keep the text as given
        return value


def resolve_chat_template(value: str, tokenizer_path: str | None) -> str:
    """The Jinja text ``--chat-template value`` stands for (module docstring).

    Args:
        value: the flag's value.
        tokenizer_path: the tokenizer directory (its named templates), or ``None``.

    Raises:
        ValueError: naming ``chat_template`` (module docstring), listing the tokenizer's template
            names for an unknown name.
    """
    check_chat_template_arg(value)
    if os.path.isfile(value):
        return _read_template_file(value)
    if is_inline_template(value):
        return decode_inline_template(value)
    from sglang_v4.hf_transformers_utils import load_tokenizer_config

    templates = load_tokenizer_config(tokenizer_path).get("chat_template") if tokenizer_path else None
    if isinstance(templates, dict) and isinstance(templates.get(value), str):
        text = templates[value]
        _check_text(text, f"the tokenizer's template {value!r}")
        return text
    if isinstance(templates, str) and value == "default":
        _check_text(templates, "the tokenizer's template")
        return templates
    names = (
        sorted(templates)
        if isinstance(templates, dict)
        else ["default"]
        if isinstance(templates, str)
        else []
    )
    have = f"its templates are {names}" if names else "it has no chat template"
    raise ValueError(
        f"chat_template: {value!r} is neither a file, a Jinja template nor a template name of the "
        f"tokenizer at {tokenizer_path!r} ({have}); SGLang's built-in conversation templates are not "
        "served: without --chat-template, prompts use the DeepSeek-V4 chat encoding"
    )


def _read_template_file(path: str) -> str:
    """The text of a template file; a JSON file is refused (module docstring).

    Raises:
        ValueError: naming ``chat_template``: unreadable, or a JSON document.
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"chat_template: cannot read {path!r} ({e})") from None
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, (dict, list)):  # a template that happens to be a JSON scalar ("42")
        return text
    raise ValueError(
        f"chat_template: {path!r} is a JSON file (SGLang's conversation-template format, not served); "
        "pass a Jinja template file, e.g. the model's chat_template.jinja"
    )


def _check_text(text: str, source: str) -> None:
    """Refuse a template that is empty or does not compile.

    Raises:
        ValueError: naming ``chat_template``, ``source`` and Jinja's message.
    """
    if not text.strip():
        raise ValueError(f"chat_template: {source} is empty")
    why = compile_error(text)
    if why is not None:
        raise ValueError(f"chat_template: {source} is not a valid Jinja template ({why})")


def load_template_renderer(tokenizer_path: str | None) -> Any:
    """The ``transformers`` tokenizer of ``tokenizer_path`` whose ``apply_chat_template`` renders
    a ``--chat-template`` (its special tokens are the template's ``bos_token`` / ``eos_token``...).

    Raises:
        ValueError: naming ``tokenizer_path`` and ``chat_template``: transformers cannot load it
            (e.g. a special token given as an ``AddedToken`` dict without its ``"__type"``, which
            transformers 5 refuses; the server's own tokenizer reads it).
    """
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(tokenizer_path)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a bad directory
        raise ValueError(
            f"tokenizer_path: transformers cannot load the tokenizer at {tokenizer_path!r} to render "
            f"--chat-template ({' '.join(str(e).split())}); fix the tokenizer files or drop chat_template "
            "to use the built-in DeepSeek-V4 chat encoding"
        ) from None
