"""The offline ``Engine``'s arguments as plain Python values.

``Engine.generate`` / ``async_generate`` / ``score`` go through the same checks as the HTTP
routes, which read JSON: token ids must be ``int``, numbers ``int`` / ``float``. A Python caller
often holds them in numpy or torch instead (token ids from a tokenizer called with
``return_tensors="np"`` or ``"pt"``, a ``max_new_tokens`` computed with numpy). SGLang's and
vLLM's offline APIs take such values, so here they are turned into the Python values they stand
for before the checks: an array or tensor into (nested) lists of Python scalars, a numpy / torch
scalar into a Python ``int`` / ``float`` / ``bool``. A value that stands for no integer stays what
it was (a float array becomes a list of floats, which the checks then refuse naming the field).
"""

from __future__ import annotations

from typing import Any

#: Top-level modules of the array libraries whose values are converted.
_ARRAY_MODULES = frozenset({"numpy", "torch"})


def _is_array_value(value: Any) -> bool:
    """Whether ``value`` is a numpy / torch array, tensor or scalar (it has ``tolist``)."""
    module = type(value).__module__.partition(".")[0]
    return module in _ARRAY_MODULES and callable(getattr(value, "tolist", None))


def plain_python_values(value: Any) -> Any:
    """``value`` with every numpy / torch array, tensor or scalar in it replaced by its Python
    value (``ndarray.tolist()`` / ``Tensor.tolist()``: nested lists of ``int`` / ``float`` /
    ``bool``, or one such scalar), looking into lists, tuples (kept tuples) and dicts (their
    values). Other values are returned unchanged (the same object when nothing in it changed).

    Example: ``{"input_ids": np.array([[5, 6]]), "sampling_params": {"max_new_tokens":
    np.int64(2)}}`` -> ``{"input_ids": [[5, 6]], "sampling_params": {"max_new_tokens": 2}}``.
    """
    if _is_array_value(value):
        return value.tolist()
    if isinstance(value, list):
        items = [plain_python_values(v) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, tuple):
        items = [plain_python_values(v) for v in value]
        return tuple(items) if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        new = {k: plain_python_values(v) for k, v in value.items()}
        return new if any(new[k] is not value[k] for k in value) else value
    return value
