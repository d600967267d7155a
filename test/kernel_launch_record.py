"""Record the Triton kernel launches of CPU runs and compile each one for Hopper (sm_90).

``TRITON_INTERPRET=1`` runs ``@triton.jit`` kernels as numpy and never calls the compiler, so a
kernel can pass every CPU test and still be refused by the real compiler on the GPU (a
non-constexpr module global read inside a jit function, ``tl.multiple_of`` on a constexpr, a
layout the backend does not support, a block that needs more shared memory than a block may use).
This module closes that gap in two steps, in two processes (a module imported under the
interpreter holds ``InterpretedFunction`` objects that the compiler cannot read):

1. **Record** (``TRITON_INTERPRET=1``): ``record_launches`` patches
   ``InterpretedFunction.run`` (what ``kernel[grid](...)`` calls) and, for every launch, binds the
   arguments with Triton's own launch binder for a ``GPUTarget("cuda", 90, 32)`` backend: the
   same specialization a CUDA launch computes (tensor dtype -> ``*bf16`` / ``*fp32`` /
   ``*fp8e4nv`` / ``*u8`` / ``*i64``..., ints -> ``i32`` / ``i64`` by range and ``1`` -> constexpr,
   floats -> ``fp32``, ``tt.divisibility`` 16 for 16-aligned pointers and ints, constexpr
   parameters from the annotations) and the launch options (``num_warps``, ``num_stages``).
   ``dry=True`` records without executing (for calls whose inputs the interpreter cannot run,
   e.g. bf16 ``tl.dot``).
2. **Compile** (no interpreter): ``compile_records`` runs ``triton.compile(ASTSource(...),
   target=GPUTarget("cuda", 90, 32))`` once per distinct (kernel, signature, constexprs,
   divisibility, options) and checks the block's shared memory against the 227 KiB limit.

Used as a pytest plugin (``-p kernel_launch_record`` with ``SGLANG_V4_LAUNCH_LOG=<file>``) it
records every launch of a pytest run to ``<file>`` (pickled list of records).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import subprocess
import traceback
from collections.abc import Iterator
from typing import Any

SMEM_LIMIT = 227 * 1024  # H100 / H200: dynamic shared memory one block may use
TARGET_ARCH = 90
_LOG_ENV = "SGLANG_V4_LAUNCH_LOG"
_DRY_ENV = "SGLANG_V4_LAUNCH_DRY"
PACKAGE = "sgl_kernel_v4"
_OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")


def _target() -> Any:
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", TARGET_ARCH, 32)


def _plain(value: Any) -> Any:
    """A picklable stand-in for a constexpr value (Python scalars and Triton dtypes pickle as is)."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if value is None or isinstance(value, (bool, int, float, str, tl.dtype)):
        return value
    raise TypeError(f"constexpr value of type {type(value).__name__} cannot be recorded")


#: id(interpreted kernel) -> (the kernel, its JITFunction, the sm_90 backend, the launch binder)
_BINDERS: dict[int, tuple[Any, Any, Any, Any]] = {}


def bind_launch(interp: Any, args: tuple, kwargs: dict) -> dict:
    """The launch record of ``interp[grid](*args, **kwargs)`` as a CUDA sm_90 launch would see it.

    Returns ``{"fn": "module:qualname", "signature": {name: type}, "constexprs": {path: value},
    "attrs": {path: [["tt.divisibility", 16]]}, "options": {...}}``, built with Triton's own
    binder (``create_function_from_signature`` + ``JITFunction._pack_args``) so the signature is
    the one the GPU compiles, not a hand-written guess."""
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = interp.fn
    cached = _BINDERS.get(id(interp))
    if cached is None or cached[0] is not interp:  # building the JITFunction re-reads the source
        jit = JITFunction(fn, **interp.kwargs)
        backend = make_backend(_target())
        cached = (interp, jit, backend, create_function_from_signature(jit.signature, jit.params, backend))
        _BINDERS[id(interp)] = cached
    _, jit, backend, binder = cached
    bound, specialization, options = binder(*args, **kwargs)
    _, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound, specialization, options)
    return {
        "fn": f"{fn.__module__}:{fn.__qualname__}",
        "signature": dict(signature),
        "constexprs": {k: _plain(v) for k, v in constexprs.items()},
        "attrs": {k: v for k, v in attrs.items() if v},
        "options": {k: kwargs[k] for k in _OPTION_KEYS if k in kwargs},
    }


@contextlib.contextmanager
def record_launches(dry: bool = False) -> Iterator[list[dict]]:
    """Record every interpreted Triton launch made inside the block (needs ``TRITON_INTERPRET=1``
    set before the kernels' modules were imported). Yields the list the records are appended to;
    with ``dry`` the kernels are not executed (their outputs keep whatever the caller put there).

    Raises RuntimeError when Triton is not in interpreter mode (nothing would be recorded)."""
    from triton import knobs
    from triton.runtime.interpreter import InterpretedFunction

    if not knobs.runtime.interpret:
        raise RuntimeError("record_launches needs TRITON_INTERPRET=1 before triton is imported")
    records: list[dict] = []
    orig = InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            records.append(bind_launch(self, args, kwargs))
        if dry:
            return None
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield records
    finally:
        InterpretedFunction.run = orig


def record_key(rec: dict) -> str:
    """The identity of a compile: kernel, signature, constexprs, divisibility, options."""
    parts = (
        rec["fn"],
        sorted(rec["signature"].items()),
        sorted((k, repr(v)) for k, v in rec["constexprs"].items()),
        sorted(rec["attrs"].items()),
        sorted(rec["options"].items()),
    )
    return repr(parts)


def distinct(records: list[dict]) -> list[dict]:
    """``records`` with one entry per ``record_key``, first seen first."""
    seen: dict[str, dict] = {}
    for rec in records:
        seen.setdefault(record_key(rec), rec)
    return list(seen.values())


def _resolve(name: str) -> Any:
    import importlib

    module, qualname = name.split(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def compile_record(rec: dict) -> str | None:
    """Compile one record for sm_90 (no GPU needed; ptxas ships with Triton). Returns None when
    the kernel compiles and fits the shared-memory limit, else the error text. Must run without
    ``TRITON_INTERPRET`` (the kernel must be a ``JITFunction``)."""
    import triton
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    try:
        fn = _resolve(rec["fn"])
        if not isinstance(fn, JITFunction):
            return f"{rec['fn']} is {type(fn).__name__}, not a JITFunction (TRITON_INTERPRET set?)"
        src = ASTSource(fn=fn, signature=rec["signature"], constexprs=rec["constexprs"], attrs=rec["attrs"])
        kernel = triton.compile(src, target=_target(), options=dict(rec["options"]))
    except Exception:  # noqa: BLE001 - every compiler error is the finding to report
        return traceback.format_exc(limit=-3)
    if "cubin" not in kernel.asm:
        return "no cubin produced"
    if kernel.metadata.shared > SMEM_LIMIT:
        return f"needs {kernel.metadata.shared} B of shared memory per block (> {SMEM_LIMIT})"
    return None


def _test_local(rec: dict) -> bool:
    """A helper kernel built inside a test function (not reachable from its module at import):
    not a kernel of the package, so not compiled."""
    module, qualname = rec["fn"].split(":")
    if module.startswith(PACKAGE):
        return False
    try:
        _resolve(rec["fn"])
    except (ImportError, AttributeError):
        return True
    return False


def compile_records(records: list[dict]) -> dict[str, str]:
    """Compile every distinct record (test-local helper kernels excepted); returns
    ``{description: error}`` for those that fail."""
    failures: dict[str, str] = {}
    for rec in distinct(records):
        if _test_local(rec):
            continue
        err = compile_record(rec)
        if err is not None:
            desc = f"{rec['fn']} sig={rec['signature']} constexprs={rec['constexprs']} opts={rec['options']}"
            failures[desc] = err
    return failures


_WIDTH_BITS = re.compile(r"(?:ld|st)\.global(?:\.[a-z]+)*?(?:\.v(\d))?\.[bsuf](\d+)\b")
_CP_ASYNC = re.compile(r"cp\.async\.c[ag]\.shared\.global \[[^]]*\], \[[^]]*\], (0x[0-9a-fA-F]+|\d+)")


def global_access_widths(ptx: str, source: str) -> dict[str, int]:
    """Widest global memory access (bytes: ``ld``/``st.global`` incl. vectors, ``cp.async``
    copies) per source location ``file:line:col`` whose file name is ``source``, read from
    the ``.loc`` directives of the PTX. A vector access of N bytes needs an N-byte aligned address,
    so this is the alignment the compiler assumed there."""
    out: dict[str, int] = {}
    loc = ""
    for line in ptx.splitlines():
        if ".loc" in line and "//" in line:
            loc = line.split("//", 1)[1].strip().split(" ")[0]
            continue
        if "global" not in line or loc.split(":", 1)[0] != source:
            continue
        m = _CP_ASYNC.search(line)
        if m:
            w = int(m[1], 0)
        else:
            m = _WIDTH_BITS.search(line)
            if not m:
                continue
            w = int(m[1] or 1) * int(m[2]) // 8
        out[loc] = max(out.get(loc, 0), w)
    return out


def compile_kernel(rec: dict) -> Any:
    """The sm_90 compiled kernel of one record (``.asm["ptx"]``, ``.metadata.shared``); no
    interpreter; raises what ``triton.compile`` raises."""
    import triton
    from triton.compiler import ASTSource

    src = ASTSource(
        fn=_resolve(rec["fn"]), signature=rec["signature"], constexprs=rec["constexprs"], attrs=rec["attrs"]
    )
    return triton.compile(src, target=_target(), options=dict(rec["options"]))


def sass_calls(kernel: Any) -> int | None:
    """``CALL`` instructions in a compiled kernel's sm_90 code (``cuobjdump -sass`` of its cubin;
    a 64-bit integer division is such a call per value), or None when the tool is not shipped."""
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.access(tool, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"\sCALL\.", sass))


def named_constexprs(rec: dict) -> dict[str, Any]:
    """``{parameter name: value}`` of a record's constexprs."""
    names = list(rec["signature"])
    return {names[k[0]]: v for k, v in rec["constexprs"].items() if len(k) == 1}


def dump(records: list[dict], path: str) -> None:
    """Append ``records`` (deduplicated) to the pickle log at ``path``."""
    old = load(path) if os.path.exists(path) else []
    with open(path, "wb") as f:
        pickle.dump(distinct(old + records), f)


def load(path: str) -> list[dict]:
    """The records of the pickle log at ``path``."""
    with open(path, "rb") as f:
        return pickle.load(f)


# ---- pytest plugin: ``-p kernel_launch_record`` with SGLANG_V4_LAUNCH_LOG=<file> ----
_session_records: contextlib.ExitStack | None = None
_records: list[dict] = []


def pytest_sessionstart(session: Any) -> None:  # noqa: ARG001 - pytest hook signature
    global _session_records, _records
    if not os.environ.get(_LOG_ENV):
        return
    _session_records = contextlib.ExitStack()
    _records = _session_records.enter_context(record_launches(dry=os.environ.get(_DRY_ENV) == "1"))


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:  # noqa: ARG001 - pytest hook signature
    if _session_records is None:
        return
    _session_records.close()
    dump(_records, os.environ[_LOG_ENV])


if __name__ == "__main__":
    import sys

    fails = compile_records(load(sys.argv[1]))
    for desc, err in fails.items():
        print(f"FAIL {desc}\n{err}")
    print(f"{len(distinct(load(sys.argv[1])))} distinct launches, {len(fails)} failed")
    sys.exit(1 if fails else 0)
