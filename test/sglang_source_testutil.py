"""SGLang 0.5.23's own functions as oracles, where their module cannot be imported here.

Some modules of the installed SGLang (``srt/managers/schedule_batch.py``,
``srt/layers/sampler.py``) import vision and GPU packages this environment lacks. The helper below
reads one function's source from the installed file (Python's ``ast``) and compiles it alone,
with the names it reads supplied by the caller, so the test runs SGLang's own code, unchanged.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import textwrap
from collections.abc import Callable
from typing import Any

import pytest


def sglang_function(
    module_path: str, name: str, scope: dict[str, Any], class_name: str | None = None
) -> Callable[..., Any]:
    """One function of the installed SGLang, compiled from its source.

    Args:
        module_path: the file below the ``sglang`` package, e.g. ``"srt/layers/sampler.py"``.
        name: the function's name (a method's name when ``class_name`` is given; the method is
            returned as a plain function taking ``self`` first).
        scope: the globals the function reads (names it imports at module level).
        class_name: the class holding the method, or ``None`` for a module-level function.

    Returns:
        The compiled function.

    Raises:
        LookupError: the file has no such function.
        pytest.skip.Exception: SGLang is not installed (the calling test is skipped).
    """
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("SGLang is not installed (its source is the oracle)")
    path = os.path.join(os.path.dirname(spec.origin), *module_path.split("/"))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    body = ast.parse(text).body
    if class_name is not None:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        if cls is None:
            raise LookupError(f"{module_path} has no class {class_name}")
        body = cls.body
    fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        raise LookupError(f"{module_path} has no function {name}")
    src = textwrap.dedent(ast.get_source_segment(text, fn) or "")
    namespace = dict(scope)
    exec(compile(src, path, "exec"), namespace)  # noqa: S102 - SGLang's own code, the oracle
    return namespace[name]


def sglang_classes(module_path: str, names: list[str], scope: dict[str, Any]) -> dict[str, type]:
    """Classes of the installed SGLang, compiled from their source in the given order (a base
    class first), as :func:`sglang_function` compiles one function.

    Args:
        module_path: the file below the ``sglang`` package, e.g. ``"srt/managers/schedule_batch.py"``.
        names: the class names, each defined at the module's top level.
        scope: the globals the classes read (names the module imports).

    Returns:
        ``{name: class}``.

    Raises:
        LookupError: the file has no class of one of the names.
    """
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("SGLang is not installed (its source is the oracle)")
    path = os.path.join(os.path.dirname(spec.origin), *module_path.split("/"))
    with open(path, encoding="utf-8") as f:
        text = f.read()
    classes = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)}
    namespace = dict(scope)
    for name in names:
        if name not in classes:
            raise LookupError(f"{module_path} has no class {name}")
        src = ast.get_source_segment(text, classes[name]) or ""
        exec(compile(src, path, "exec"), namespace)  # noqa: S102 - SGLang's own code, the oracle
    return {name: namespace[name] for name in names}
