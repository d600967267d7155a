"""docs/ARCHITECTURE.md's module map against the modules on disk.

The "Module map" section lists every module of ``python/sglang_v4/`` (the first column of its
table) and of ``sgl-kernel-v4/sgl_kernel_v4/`` (the package table, then the op table whose
``ref/`` and ``triton/`` columns name files of those folders). The oracle is the file tree itself:
every ``*.py`` file (a sub-package's ``__init__.py`` excepted: it only marks or re-exports its
package) must be listed exactly once, and every listed path must exist.
"""

from __future__ import annotations

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
