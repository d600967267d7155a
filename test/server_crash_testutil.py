"""Process lookups shared by the server crash tests: a process's children, and the one child running a given program."""

from __future__ import annotations

from pathlib import Path


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(x) for x in text)
    return out


def _children_named(pid: int, name: str) -> list[int]:
    """The children of ``pid`` whose process name (``/proc/PID/comm``, 15 bytes) is
    ``sglang_v4::{name}`` cut to 15 bytes."""
    return [
        kid
        for kid in _children(pid)
        if f"sglang_v4::{name}"[:15] == Path(f"/proc/{kid}/comm").read_text().strip()
    ]


def _child_named(pid: int, name: str) -> int:
    """The child of ``pid`` named for ``name`` (:func:`_children_named`); exactly one."""
    kids = _children_named(pid, name)
    assert len(kids) == 1, f"{name} children of {pid}: {kids} (all children: {_children(pid)})"
    return kids[0]
