"""docs/ARCHITECTURE.md's module map against the modules on disk.

The "Module map" section lists every module of ``python/sglang_v4/`` (the first column of its
table) and of ``sgl-kernel-v4/sgl_kernel_v4/`` (the package table, then the op table whose
``ref/`` and ``triton/`` columns name files of those folders). The oracle is the file tree itself:
every ``*.py`` file (a sub-package's ``__init__.py`` excepted: it only marks or re-exports its
package) must be listed exactly once, and every listed path must exist.

Then every reference of docs/ARCHITECTURE.md and README.md: each ``.py`` path (prose and code
blocks) names a file of the repository, each ``sglang_v4.x`` / ``sgl_kernel_v4.x`` name a module
or a top-level name of one, each ``--flag`` one that ``launch_server``'s parser takes (or the
command the line names, a vLLM flag of ``server_args_vllm_hints``, another program's), and each
backticked class / function name one the code defines. The oracles are the file tree, the
parser built by ``server_args_cli.add_server_cli_args`` and the source text.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import functools
import re
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCH = REPO / "docs" / "ARCHITECTURE.md"
PY_ROOT = "python/sglang_v4/"
KERNEL_ROOT = "sgl-kernel-v4/sgl_kernel_v4/"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_PY_TOKEN = re.compile(r"`([A-Za-z0-9_./]+\.py)`")


def _module_map_lines(text: str) -> list[str]:
    """The lines of the ``## Module map`` section (up to the next ``## `` heading)."""
    lines = text.splitlines()
    start = lines.index("## Module map")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]


def listed_modules(text: str) -> list[str]:
    """Repository-relative paths the module map lists, once per mention (duplicates kept).

    Python table: the ``.py`` names of the first cell; a name without ``/`` is in the folder of
    the previous name of that cell (``layers/linear.py``, ``layernorm.py``). Kernel package
    table: the first cell, under ``sgl_kernel_v4/``. Op table: every ``.py`` name of the
    ``ref/`` and ``triton/`` columns, in that folder.
    """
    out: list[str] = []
    root: str | None = None
    for line in _module_map_lines(text):
        if line.startswith(f"`{PY_ROOT}`"):
            root = PY_ROOT
            continue
        if line.startswith(f"`{KERNEL_ROOT}`"):
            root = KERNEL_ROOT
            continue
        if not line.startswith("|") or root is None:
            continue
        cells = _cells(line)
        if not cells or set(cells[0]) <= {"-"} or cells[0] in ("module", "op"):
            continue
        if root == KERNEL_ROOT and len(cells) == 3:  # op | ref/ | triton/
            for folder, cell in (("ref/", cells[1]), ("triton/", cells[2])):
                for name in _PY_TOKEN.findall(cell):
                    assert "/" not in name, f"op table names {name!r} outside {folder}"
                    out.append(root + folder + name)
            continue
        base = ""
        for name in _PY_TOKEN.findall(cells[0]):
            if "/" in name:
                base = name.rsplit("/", 1)[0] + "/"
                out.append(root + name)
            else:
                out.append(root + base + name)
    return out


def modules_on_disk() -> set[str]:
    found: set[str] = set()
    for root in (PY_ROOT, KERNEL_ROOT):
        for path in (REPO / root).rglob("*.py"):
            rel = path.relative_to(REPO).as_posix()
            if path.name == "__init__.py" and path.parent != REPO / root:
                continue  # a sub-package's marker / re-exports
            found.add(rel)
    return found


def test_every_module_listed_exactly_once_and_every_listed_module_exists() -> None:
    listed = listed_modules(ARCH.read_text(encoding="utf-8"))
    counts = Counter(listed)
    on_disk = modules_on_disk()
    missing_on_disk = sorted(p for p in counts if not (REPO / p).is_file())
    not_listed = sorted(on_disk - set(counts))
    twice = sorted(p for p, n in counts.items() if n > 1)
    assert not missing_on_disk, f"listed in docs/ARCHITECTURE.md but not on disk: {missing_on_disk}"
    assert not not_listed, f"on disk but not in docs/ARCHITECTURE.md's module map: {not_listed}"
    assert not twice, f"listed more than once in docs/ARCHITECTURE.md's module map: {twice}"


def test_parser_sees_a_missing_and_a_stale_entry() -> None:
    """The check itself can fail: a row removed and a row naming a deleted file are both seen."""
    text = ARCH.read_text(encoding="utf-8")
    listed = set(listed_modules(text))
    assert PY_ROOT + "sampling/penalties.py" in listed
    assert KERNEL_ROOT + "triton/attention_kernels.py" in listed
    dropped = "\n".join(ln for ln in text.splitlines() if not ln.startswith("| `sampling/penalties.py`"))
    assert PY_ROOT + "sampling/penalties.py" not in set(listed_modules(dropped))
    stale = text.replace("| `sampling/penalties.py` |", "| `sampling/penalty_gone.py` |")
    assert not (REPO / PY_ROOT / "sampling/penalty_gone.py").exists()
    assert PY_ROOT + "sampling/penalty_gone.py" in set(listed_modules(stale))


# ---------------------------------------------------------------------------------------------
# Every module path, dotted module, `--flag` and code name docs/ARCHITECTURE.md and README.md
# mention exists. Oracles: the file tree, the server's own argparse parser
# (``server_args_cli.add_server_cli_args``) and the other tools' parser sources, the source text
# (names defined by ``def`` / ``class`` / assignment; a module's top-level names by its AST).
# ---------------------------------------------------------------------------------------------

DOCS = (REPO / "docs" / "ARCHITECTURE.md", REPO / "README.md")
CODE_DIRS = ("python", "sgl-kernel-v4", "test", "benchmark")
#: ``.py`` names the docs give for files of a model directory, not of this repository.
MODEL_DIR_FILES = frozenset({"encoding/encoding_dsv4.py"})
#: Flags of other programs the docs quote (pytest-xdist, pip, ruff), with the program.
FOREIGN_FLAGS = {
    "--dist": "pytest-xdist",
    "--no-loadscope-reorder": "pytest-xdist",
    "--no-deps": "pip",
    "--check": "ruff format",
}
#: Code names the docs quote from other libraries (or as notation), with where they come from.
FOREIGN_NAMES = {
    "AuthenticationError": "openai client",
    "BadRequestError": "openai client",
    "NotFoundError": "openai client",
    "APIError": "openai client",
    "ChatCompletionStreamState": "openai client",
    "SystemMessageParam": "anthropic client",
    "models.list()": "openai client",
    "models.retrieve()": "openai client",
    "TokenizerInfo": "xgrammar",
    "torch.OutOfMemoryError": "torch",
    "torch.Generator": "torch",
    'torch.set_float32_matmul_precision("high")': "torch",
    "Tab": "notation of the CompressPlan table",
    "CaTab": "notation of the CompressPlan table",
    "NaN": "IEEE 754",
    "Infinity": "JSON / IEEE 754",
}
_PATH = re.compile(r"(?<![\w/.*{}$<-])((?:[\w.-]+/)*\w[\w-]*\.py)\b")
_BRACED_PATH = re.compile(r"([\w/.-]*)\{([\w,]+)\}([\w/.-]*\.py)\b")
_GLOB_PATH = re.compile(r"([\w/.-]*\*[\w/.*-]*\.py)\b")
_DOTTED_MODULE = re.compile(r"\b(sglang_v4|sgl_kernel_v4)((?:\.\w+)+)")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_TOOL = re.compile(
    r"sglang_v4\.tools\.(\w+)|sglang_v4\.(bench_serving|launch_server)\b|benchmark/([\w/]+)\.py"
)
_ADD_ARGUMENT = re.compile(r"add_argument\(\s*\"(--[a-z0-9-]+)\"")
_SPAN = re.compile(r"`([^`\n]+)`")
_NAME_SPAN = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(\(.*\))?")
_DEFINITION = re.compile(r"\b(?:def|class)\s+(\w+)|^[ \t]*(?:\w+\.)*(\w+)[ \t]*(?::[^=\n]*)?=(?!=)", re.M)
_CAMEL = re.compile(r"[A-Z][a-z0-9]*[a-z][A-Za-z0-9]*[A-Z]?\w*|[A-Z][a-z]+")


def _repo_files() -> list[str]:
    """Repository-relative paths of every file under the code folders and ``docs/``."""
    out = []
    for top in (*CODE_DIRS, "docs"):
        out += [p.relative_to(REPO).as_posix() for p in (REPO / top).rglob("*") if p.is_file()]
    return out + [p.name for p in REPO.iterdir() if p.is_file()]


def missing_paths(text: str, files: list[str]) -> list[str]:
    """``.py`` paths of ``text`` (code blocks and prose too) that name no repository file.

    A path resolves when it is the tail of a file's repository-relative path at a folder
    boundary (``layers/moe.py``, ``ref/compressor_state.py``, ``test/conftest.py``); a brace set
    (``server_args_compat_{kernels,runtime}.py``) is expanded first and a glob (``*_testutil.py``)
    must match at least one file."""
    tails: set[str] = set()
    for f in files:
        parts = f.split("/")
        tails.update("/".join(parts[i:]) for i in range(len(parts)))
    wanted: list[str] = []
    for head, alts, tail in _BRACED_PATH.findall(text):
        wanted += [head + alt + tail for alt in alts.split(",")]
    text = _BRACED_PATH.sub(" ", text)
    bad = [g for g in _GLOB_PATH.findall(text) if not any(Path(t).match(g) for t in tails)]
    wanted += _PATH.findall(_GLOB_PATH.sub(" ", text))
    bad += [p for p in wanted if p not in tails and p not in MODEL_DIR_FILES]
    return sorted(set(bad))


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing_dotted_modules(text: str) -> list[str]:
    """``sglang_v4.x.y`` / ``sgl_kernel_v4.x`` names of ``text`` that are neither a module or
    package of the tree nor a top-level name of one (``sglang_v4.server_args.ServerArgs``)."""
    roots = {"sglang_v4": REPO / PY_ROOT, "sgl_kernel_v4": REPO / KERNEL_ROOT}
    bad = []
    for pkg, rest in _DOTTED_MODULE.findall(text):
        parts, base = rest.strip(".").split("."), roots[pkg]
        for i, part in enumerate(parts):
            if (base / part).is_dir():
                base = base / part
                continue
            module = base / f"{part}.py"
            if module.is_file():
                names = _top_level_names(module)
                if i + 1 < len(parts) and parts[i + 1] not in names:
                    bad.append(pkg + rest)
            else:
                init = base / "__init__.py"
                if not (init.is_file() and part in _top_level_names(init)):
                    bad.append(pkg + rest)
            break
    return sorted(set(bad))


def server_flags() -> set[str]:
    """Every option string of ``launch_server``'s parser (the oracle for a server flag): the
    ``ServerArgs`` flags of ``server_args_cli.add_server_cli_args`` and those ``launch_server``
    adds itself (``--config``)."""
    from sglang_v4.server_args_cli import add_server_cli_args

    parser = argparse.ArgumentParser()
    add_server_cli_args(parser)
    own = (REPO / PY_ROOT / "launch_server.py").read_text(encoding="utf-8")
    return set(parser._option_string_actions) | set(_ADD_ARGUMENT.findall(own))


def _tool_source(match: re.Match[str]) -> Path:
    tool, module, script = match.groups()
    if tool:
        return REPO / PY_ROOT / "tools" / f"{tool}.py"
    if module:
        return REPO / PY_ROOT / f"{module}.py"
    return REPO / "benchmark" / f"{script}.py"


def unknown_flags(text: str, flags: set[str], vllm_hints: set[str]) -> list[str]:
    """``--flags`` of ``text`` that no parser takes, as ``"line N: --flag"``.

    A flag is known when the server's parser takes it; when it is a vLLM flag of
    ``server_args_vllm_hints`` (refused with a hint) or another program's (``FOREIGN_FLAGS``);
    when the command the line names (``python -m sglang_v4.tools.X``, ``sglang_v4.bench_serving``,
    ``benchmark/X.py``, ``sglang_v4.launch_server``: ``--config``) defines it in its source; or,
    written as a prefix (``--speculative-*``, ``--no-...``), when a server flag starts with it."""
    bad = []
    for number, line in enumerate(text.splitlines(), 1):
        sources = [_tool_source(m) for m in _TOOL.finditer(line)]
        for flag in _FLAG.findall(line):
            if flag in flags or flag in vllm_hints or flag in FOREIGN_FLAGS:
                continue
            if flag.endswith("-") and any(f.startswith(flag) for f in flags):
                continue
            if any(s.is_file() and f'"{flag}"' in s.read_text(encoding="utf-8") for s in sources):
                continue
            bad.append(f"line {number}: {flag}")
    return bad


@functools.cache
def defined_names() -> frozenset[str]:
    """Names the code defines, read from the source text of the code folders: ``def`` /
    ``class`` names and the targets of assignments and annotated fields (the last component of
    ``self.attr = ...`` too)."""
    names: set[str] = set()
    for top in CODE_DIRS:
        for path in (REPO / top).rglob("*.py"):
            for m in _DEFINITION.finditer(path.read_text(encoding="utf-8")):
                names.add(m.group(1) or m.group(2))
    return frozenset(names)


def unknown_names(text: str, names: frozenset[str]) -> list[str]:
    """Backticked code names of ``text`` that the code does not define: a CamelCase name
    (``ForwardBatchBuilder``), a call (``get_next_batch()``, ``metadata(reqs, ...)``), a dotted
    name ending in one of those or starting with a CamelCase one (``Scheduler.step()``,
    ``ForwardBatchBuilder.build``), checked by their last component; builtins
    (``ValueError``) and ``FOREIGN_NAMES`` excepted."""
    bad = []
    for span in sorted(set(_SPAN.findall(text))):
        m = _NAME_SPAN.fullmatch(span)
        if not m or span in FOREIGN_NAMES:
            continue
        parts = m.group(1).split(".")
        last = parts[-1]
        if not (m.group(2) or _CAMEL.fullmatch(last) or (len(parts) > 1 and _CAMEL.fullmatch(parts[0]))):
            continue
        if hasattr(builtins, last):
            continue
        if last not in names:
            bad.append(span)
    return bad


def test_docs_name_existing_module_paths() -> None:
    files = _repo_files()
    for doc in DOCS:
        bad = missing_paths(doc.read_text(encoding="utf-8"), files)
        assert not bad, f"{doc.name} names .py files that do not exist: {bad}"
        bad = missing_dotted_modules(doc.read_text(encoding="utf-8"))
        assert not bad, f"{doc.name} names modules / module attributes that do not exist: {bad}"


def test_docs_name_existing_flags() -> None:
    from sglang_v4.server_args_vllm_hints import VLLM_FLAG_HINTS

    flags = server_flags()
    for doc in DOCS:
        bad = unknown_flags(doc.read_text(encoding="utf-8"), flags, set(VLLM_FLAG_HINTS))
        assert not bad, f"{doc.name} names flags that no parser takes: {bad}"


def test_docs_name_existing_code_names() -> None:
    names = defined_names()
    for doc in DOCS:
        bad = unknown_names(doc.read_text(encoding="utf-8"), names)
        assert not bad, f"{doc.name} names classes / functions the code does not define: {bad}"


def test_reference_checks_see_stale_entries() -> None:
    """Each check can fail: a renamed path, dotted module, flag and name are reported, and the
    forms that must pass (brace sets, globs, a tool's own flag, a flag prefix) pass."""
    files = _repo_files()
    assert missing_paths("`managers/scheduler.py`, `server_args_compat_{kernels,runtime}.py`", files) == []
    assert missing_paths("`*_testutil.py` and `test/conftest.py`", files) == []
    assert missing_paths("`managers/schedulr.py` `server_args_compat_{kernels,gone}.py`", files) == [
        "managers/schedulr.py",
        "server_args_compat_gone.py",
    ]
    assert missing_paths("`*_nothing_like_it.py`", files) == ["*_nothing_like_it.py"]
    assert missing_dotted_modules("`sglang_v4.server_args.ServerArgs` `sgl_kernel_v4.ref`") == []
    assert missing_dotted_modules("`sglang_v4.server_args.NoSuchArgs` `sglang_v4.tools.gone`") == [
        "sglang_v4.server_args.NoSuchArgs",
        "sglang_v4.tools.gone",
    ]
    flags = server_flags()
    assert "--context-length" in flags and "--model" in flags
    ok = "`--context-length 128k`, `--speculative-*`\npython -m sglang_v4.tools.kv_planner --preset pro\n"
    assert unknown_flags(ok, flags, set()) == []
    stale = "`--context-lenght`\n`--preset tiny` (no tool named)\n`--max-model-len`"
    assert unknown_flags(stale, flags, set()) == [
        "line 1: --context-lenght",
        "line 2: --preset",
        "line 3: --max-model-len",
    ]
    assert unknown_flags("`--max-model-len`", flags, {"--max-model-len"}) == []
    names = defined_names()
    assert unknown_names("`Scheduler.step()` `ForwardBatchBuilder` `ValueError` `max_tokens`", names) == []
    assert unknown_names("`Scheduler.stepp()` `ForwardBatchBuildr` `ForwardBatchBuilder.bild`", names) == [
        "ForwardBatchBuilder.bild",
        "ForwardBatchBuildr",
        "Scheduler.stepp()",
    ]
