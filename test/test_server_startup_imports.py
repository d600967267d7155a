"""What the HTTP process imports on its way to serving (start-up time).

Parsing the server flags must not import torch on a CPU-only torch build: ``device="auto"``
resolves from ``torch/version.py`` there (``server_args_check.torch_build_has_gpu``), so the
backend processes are spawned before the parent spends seconds importing torch. The routes'
modules that the app mounts in its lifespan are imported while the model loads
(``route_families.import_route_modules``), the Anthropic router included.

Oracles: ``torch.cuda.is_available()`` and ``torch.version`` of the installed torch, and
``sys.modules`` of a fresh interpreter.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from server_fixture import real_env
from sglang_v4.server_args_check import torch_build_has_gpu


def _fresh(code: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter; its result."""
    out = subprocess.run(
        [sys.executable, "-c", code], env=real_env(), capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_build_check_agrees_with_the_installed_torch() -> None:
    assert torch_build_has_gpu() is ((torch.version.cuda or torch.version.hip) is not None)


@pytest.mark.skipif(torch.version.cuda is not None or torch.version.hip is not None, reason="a GPU build")
def test_auto_device_on_a_cpu_only_torch_leaves_torch_unimported() -> None:
    got = _fresh(
        "import json, sys\n"
        "from sglang_v4.server_args import ServerArgs\n"
        "device = ServerArgs().device\n"
        "print(json.dumps({'device': device, 'torch': 'torch' in sys.modules}))\n"
    )
    assert got == {"device": "cuda" if torch.cuda.is_available() else "cpu", "torch": False}


def _fake_torch(tmp_path: Path, version_py: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``importlib.util.find_spec("torch")`` find a package in ``tmp_path`` whose
    ``version.py`` holds ``version_py``."""
    (tmp_path / "version.py").write_text(version_py)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: spec if name == "torch" else real(name, *a)
    )


@pytest.mark.parametrize(
    ("version_py", "expected"),
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\n", False),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", True),
        ("cuda = None\nhip = '6.3.42131'\n", True),
        ("cuda = get_cuda()\nhip = None\n", None),  # not a literal: cannot tell
        ("hip = None\n", None),  # no cuda entry
        ("cuda = None\nhip = None\n(", None),  # not Python
    ],
)
def test_build_check_reads_cuda_and_hip_of_version_py(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version_py: str, expected: bool | None
) -> None:
    _fake_torch(tmp_path, version_py, monkeypatch)
    assert torch_build_has_gpu() is expected


def test_build_check_without_a_version_file_cannot_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_torch(tmp_path, "", monkeypatch)
    (tmp_path / "version.py").unlink()
    assert torch_build_has_gpu() is None


def test_route_modules_imported_while_loading_include_the_anthropic_router() -> None:
    got = _fresh(
        "import json, sys\n"
        "from sglang_v4.entrypoints.route_families import import_route_modules\n"
        "import_route_modules()\n"
        "names = ('sglang_v4.entrypoints.anthropic.api', 'sglang_v4.entrypoints.openai.api')\n"
        "print(json.dumps({n: n in sys.modules for n in names}))\n"
    )
    assert got == {"sglang_v4.entrypoints.anthropic.api": True, "sglang_v4.entrypoints.openai.api": True}


def test_scheduler_process_module_leaves_torch_to_the_scheduler_class() -> None:
    """The prewarmed scheduler child imports ``managers.scheduler_process`` (and the scheduler
    class it names) before its job: the module itself imports no torch (the profiler imports it
    when a profile starts), so a scheduler class without a torch model starts without torch. A
    profile started then still records the step range: the Chrome trace (read with ``gzip`` and
    ``json``) holds a ``scheduler_step`` event."""
    got = _fresh(
        "import gzip, json, os, sys, tempfile\n"
        "import sglang_v4.managers.scheduler_process  # noqa: F401\n"
        "from sglang_v4.managers.control_struct import ProfileReq\n"
        "from sglang_v4.managers.scheduler_profiler import SchedulerProfiler\n"
        "before = 'torch' in sys.modules\n"
        "out = tempfile.mkdtemp()\n"
        "p = SchedulerProfiler()\n"
        "started, _ = p.start(ProfileReq(output_dir=out, profile_id='t', activities=['CPU']))\n"
        "with p.step_range():\n"
        "    sum(range(1000))\n"
        "stopped, _ = p.stop()\n"
        "events = json.load(gzip.open(os.path.join(out, 't-TP-0.trace.json.gz')))['traceEvents']\n"
        "step = any(e.get('name') == 'scheduler_step' for e in events)\n"
        "print(json.dumps({'torch': before, 'started': started, 'stopped': stopped, 'step': step}))\n"
    )
    assert got == {"torch": False, "started": True, "stopped": True, "step": True}
