"""Triton kernels read only ``tl.constexpr`` module globals.

A ``@triton.jit`` function that reads a plain Python number from its module compiles under
``TRITON_INTERPRET=1`` (numpy semantics) but is refused by the real compiler ("Cannot access global
variable ... from within @jit'ed function"), so the CPU tier passes and every CUDA launch fails.
This test walks every jit function of ``sgl_kernel_v4.triton`` with ``ast`` and checks each global
name it loads against the module's value: numbers, strings and tuples must be wrapped in
``tl.constexpr``; functions, modules and Triton objects are fine.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


def _is_jit(dec: ast.expr) -> bool:
    node = dec.func if isinstance(dec, ast.Call) else dec
    return (isinstance(node, ast.Attribute) and node.attr == "jit") or (
        isinstance(node, ast.Name) and node.id == "jit"
    )


def _local_names(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _offending_globals() -> list[str]:
    import sgl_kernel_v4.triton as pkg
    import triton.language as tl

    bad: list[str] = []
    for info in pkgutil.iter_modules(pkg.__path__):
        mod = importlib.import_module(f"{pkg.__name__}.{info.name}")
        with open(mod.__file__, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or not any(_is_jit(d) for d in fn.decorator_list):
                continue
            local = _local_names(fn)
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or node.id in local:
                    continue
                if node.id not in vars(mod):
                    continue
                value = vars(mod)[node.id]
                if isinstance(value, tl.constexpr):
                    continue
                if isinstance(value, (bool, int, float, str, tuple, list)):
                    bad.append(f"{info.name}.{fn.name}:{node.lineno} reads {node.id} = {value!r}")
    return bad


def test_jit_functions_read_only_constexpr_globals() -> None:
    assert _offending_globals() == []


def test_checker_flags_a_plain_number(tmp_path, monkeypatch) -> None:
    """The checker itself: a module-level int read by a jit function is reported."""
    src = tmp_path / "jitmod_probe.py"
    src.write_text(
        "import triton\nimport triton.language as tl\nLIMIT = 7\nOK = tl.constexpr(3)\n"
        "@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, LIMIT + OK)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import triton.language as tl

    mod = importlib.import_module("jitmod_probe")
    tree = ast.parse(src.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    loads = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    flagged = {
        n for n in loads - _local_names(fn)
        if n in vars(mod) and not isinstance(vars(mod)[n], tl.constexpr)
        and isinstance(vars(mod)[n], (bool, int, float, str, tuple, list))
    }  # fmt: skip
    assert flagged == {"LIMIT"}
