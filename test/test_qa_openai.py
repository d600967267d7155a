"""QA: ``client.models.retrieve(...)`` of the ``openai`` client (``GET /v1/models/{model}``).

Found by hand: the route was missing (FastAPI 404 ``{"detail": "Not Found"}``) although
``/v1/models`` lists the model; SGLang serves it (the model card, or 404 in the OpenAI error shape
for an unknown name). Oracle: the real ``openai`` client's parser and its ``NotFoundError``.
The server runs the model-free FakeScheduler (process wiring only).
"""

from __future__ import annotations

import pytest
from server_fixture import fake_env, make_fake_model_dir, start_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("qa_openai")
    h = start_server(
        ["--model-path", str(make_fake_model_dir(root)), "--served-model-name", "qa-model"],
        fake_env(),
        root / "server.log",
    )
    yield h
    assert h.stop() == 0


def test_models_retrieve(server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY")
    listed = [m.id for m in client.models.list().data]
    assert listed == ["qa-model"]
    card = client.models.retrieve("qa-model")
    assert card.id == "qa-model" and card.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")
