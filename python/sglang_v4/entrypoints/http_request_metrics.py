"""HTTP-level Prometheus metrics of ``--enable-metrics``, in SGLang's names and labels.

SGLang's server counts every HTTP exchange besides the per-generation families of
:class:`~sglang_v4.entrypoints.metrics.TokenizerMetrics`, so a request refused before it reaches the
scheduler (a 400 for a bad field, a 401 without the key, a 404 for an unknown path) is visible on
``/metrics`` too:

- ``sglang:http_requests_total`` (counter; labels ``endpoint``, ``method``): requests received;
- ``sglang:http_responses_total`` (counter; labels ``endpoint``, ``status_code``, ``method``):
  responses sent, by HTTP status (``"500"`` for a handler that raised before answering);
- ``sglang:http_requests_active`` (gauge; labels ``endpoint``, ``method``): requests being served,
  a streamed response until its last byte; 0 again when the server is idle;
- ``sglang:routing_keys_active`` (gauge, no label): distinct ``x-smg-routing-key`` header values
  among the requests being served.

``endpoint`` is the path template of the route that matches (``/v1/models/{model_id}``, not the
model asked for), else ``"unmatched"`` (one series for every unknown path; SGLang uses the path as
sent, a series per path). Each series also carries ``model_name``, as
every other ``sglang:`` series here does (a label SGLang's HTTP families lack; a query written for
SGLang's, which names a subset of the labels, selects the same series).
"""

from __future__ import annotations

from typing import Any

#: The request header whose distinct values ``sglang:routing_keys_active`` counts (SGLang's).
ROUTING_KEY_HEADER = b"x-smg-routing-key"


class HttpRequestMetrics:
    """The four HTTP families of the module docstring, registered in ``registry`` (a
    ``prometheus_client.CollectorRegistry``), each series labelled with ``labels``
    (``{"model_name": ...}``)."""

    def __init__(self, registry: Any, labels: dict[str, str]) -> None:
        from prometheus_client import Counter, Gauge

        self.labels = dict(labels)
        lab = list(self.labels)

        self.requests_total = Counter(
            "sglang:http_requests",
            "Total number of HTTP requests by endpoint and method",
            [*lab, "endpoint", "method"],
            registry=registry,
        )
        self.responses_total = Counter(
            "sglang:http_responses",
            "Total number of HTTP responses by endpoint and status code",
            [*lab, "endpoint", "status_code", "method"],
            registry=registry,
        )
        self.requests_active = Gauge(
            "sglang:http_requests_active",
            "Number of currently active HTTP requests",
            [*lab, "endpoint", "method"],
            registry=registry,
        )
        self.routing_keys_active = Gauge(
            "sglang:routing_keys_active",
            "Number of unique routing keys with active requests",
            lab,
            registry=registry,
        ).labels(**self.labels)
        self._routing_keys: dict[str, int] = {}

    def routing_key_enter(self, key: str) -> None:
        """A request with routing key ``key`` started (the gauge counts distinct keys)."""
        self._routing_keys[key] = self._routing_keys.get(key, 0) + 1
        if self._routing_keys[key] == 1:
            self.routing_keys_active.inc()

    def routing_key_exit(self, key: str) -> None:
        """A request with routing key ``key`` ended."""
        left = self._routing_keys.get(key, 0) - 1
        if left > 0:
            self._routing_keys[key] = left
        elif key in self._routing_keys:
            del self._routing_keys[key]
            self.routing_keys_active.dec()


def http_metrics_of(tm: Any) -> HttpRequestMetrics | None:
    """The :class:`HttpRequestMetrics` of tokenizer manager ``tm`` (``None`` for no manager, or
    before its metrics are made)."""
    metrics = getattr(tm, "metrics", None)
    return None if metrics is None else metrics.http


def _leaf_routes(routes: Any) -> Any:
    """The routes of ``routes``, a router included as one entry (FastAPI's included-router
    object, which has ``effective_route_contexts``) expanded into the routes it serves."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is None:
            yield route
            continue
        for ctx in contexts():
            yield getattr(ctx, "starlette_route", None) or ctx.original_route


#: The ``endpoint`` label of a request no route matches (a 404 for an unknown path).
UNMATCHED_ENDPOINT = "unmatched"


def endpoint_of(scope: dict[str, Any]) -> str:
    """The ``endpoint`` label of an HTTP ``scope``: the path template of the first route of
    ``scope["app"]`` that fully matches it (routers included with ``include_router`` too), else
    :data:`UNMATCHED_ENDPOINT`. SGLang labels an unmatched request with its path as sent, so a
    client probing random paths adds a series per path without bound (its code notes the risk);
    here every unmatched path shares one series."""
    from starlette.routing import Match

    app = scope.get("app")
    for route in _leaf_routes(getattr(app, "routes", ())):
        path = getattr(route, "path", None)
        if path is not None and route.matches(scope)[0] == Match.FULL:
            return str(path)
    return UNMATCHED_ENDPOINT


class HttpRequestMetricsMiddleware:
    """ASGI middleware recording each HTTP exchange in the :class:`HttpRequestMetrics` that
    ``get_metrics()`` returns (``None``: nothing recorded, e.g. while the server starts).

    Args:
        app: the wrapped ASGI app.
        get_metrics: a callable returning the current :class:`HttpRequestMetrics` or ``None``.
    """

    def __init__(self, app: Any, get_metrics: Any) -> None:
        self.app = app
        self.get_metrics = get_metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        metrics = self.get_metrics() if scope["type"] == "http" else None
        if metrics is None:
            await self.app(scope, receive, send)
            return
        endpoint, method = endpoint_of(scope), str(scope.get("method", ""))
        key = next(
            (v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == ROUTING_KEY_HEADER), ""
        )
        metrics.requests_total.labels(**metrics.labels, endpoint=endpoint, method=method).inc()
        active = metrics.requests_active.labels(**metrics.labels, endpoint=endpoint, method=method)
        active.inc()
        if key:
            metrics.routing_key_enter(key)
        status: list[int] = []

        async def send_counted(message: Any) -> None:
            if message["type"] == "http.response.start" and not status:
                status.append(int(message["status"]))
                metrics.responses_total.labels(
                    **metrics.labels, endpoint=endpoint, status_code=str(status[0]), method=method
                ).inc()
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        except Exception:
            if not status:  # the client is answered 500 by the server's error handler
                metrics.responses_total.labels(
                    **metrics.labels, endpoint=endpoint, status_code="500", method=method
                ).inc()
            raise
        finally:
            active.dec()
            if key:
                metrics.routing_key_exit(key)
