"""The chat flags of a typical SGLang DeepSeek launch command reach the server.

``--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4 --trust-remote-code --chat-template
FILE`` are accepted by ``launch_server``; the Jinja file replaces the built-in V4 encoding (oracle:
the prompt's token count equals that of the rendering written out by hand), and ``/v1/models``
lists the model directory's short name, which clients then send. The server runs the model-free
FakeScheduler (process wiring only).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from server_fixture import (
    REPO,
    fake_env,
    hf_auto_tokenizer,
    make_fake_model_dir,
    start_server,
)

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(240)

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("qa_chat_flags")
    tpl = root / "chat.jinja"
    tpl.write_text(TEMPLATE)
    args = [
        "--model-path", str(make_fake_model_dir(root)), "--trust-remote-code", "--chat-template", str(tpl),
        "--tool-call-parser", "deepseekv4", "--reasoning-parser", "deepseek-v4",
    ]  # fmt: skip
    h = start_server(args, fake_env(), root / "server.log")
    yield h
    assert h.stop() == 0


def test_chat_template_and_model_id(server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY", max_retries=0)
    (model,) = [m.id for m in client.models.list().data]
    assert model == "fake-model"
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hello"}]
    r = client.chat.completions.create(model=model, messages=msgs, tools=[tool], max_tokens=3)
    tok = hf_auto_tokenizer()
    expected = "<｜begin▁of▁sentence｜><system>S<user>Hello<tools>lookup;<assistant>"
    assert r.usage.prompt_tokens == len(tok.encode(expected, add_special_tokens=False))


def test_bad_parser_name_is_a_usage_error() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sglang_v4.launch_server", "--tool-call-parser", "nope", "--port", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # argparse's usage error, as SGLang's parser gives it: exit 2, one line naming the flag and value
    last = p.stderr.splitlines()[-1]
    assert p.returncode == 2 and "--tool-call-parser" in last and "'nope'" in last, p.stderr[-2000:]
