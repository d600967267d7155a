"""Process checks shared by the server shutdown tests: whether a pid is alive and a process's children."""

from __future__ import annotations

from pathlib import Path


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out.extend(int(x) for x in (task / "children").read_text().split())
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False
