"""DSML tool-call text for tests: DeepSeek-V4's ``<｜DSML｜tool_calls>`` block as the model writes it
(the format of the chat encoding's tool prompt, ``sglang_v4.entrypoints.chat_encoding``)."""

from __future__ import annotations

#: The fullwidth marker of every DSML tag.
DSML = "｜DSML｜"


def dsml_param(key: str, is_string: bool, value: str) -> str:
    """One ``<｜DSML｜parameter name=.. string="true|false">value</｜DSML｜parameter>`` tag."""
    flag = "true" if is_string else "false"
    return f'<{DSML}parameter name="{key}" string="{flag}">{value}</{DSML}parameter>'


def dsml_invoke(name: str, *params: str) -> str:
    """One ``<｜DSML｜invoke name=..>`` of the given parameter tags, one per line."""
    return f'<{DSML}invoke name="{name}">\n' + "\n".join(params) + f"\n</{DSML}invoke>"


def dsml_block(*invokes: str) -> str:
    """A ``<｜DSML｜tool_calls>`` block of the given invokes, with the format's ``"\\n\\n"`` before it."""
    return f"\n\n<{DSML}tool_calls>\n" + "\n".join(invokes) + f"\n</{DSML}tool_calls>"
