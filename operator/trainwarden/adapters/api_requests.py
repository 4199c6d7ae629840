"""Every request the official client sends, counted by verb, resource and answer
(trainwarden_api_requests_total, as controller-runtime's rest_client_requests_total).

Counted in the client's REST layer (`rest_client.request`), which every call passes: the
Kube adapter's, the informers' lists and watches, the leader Lease's. kopf's own watches
and patches go through aiohttp and are not counted (docs/observability.md).
"""

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from trainwarden import metrics

VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update"}
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
"""The subresources of a Namespace itself: /api/v1/namespaces/NAME/status is one, not a
collection named "status" in namespace NAME."""


def _resource_path(path: str) -> list[str] | None:
    """The segments after /api/VERSION or /apis/GROUP/VERSION, without the namespace;
    None for anything else (discovery, /version, /openapi)."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 3 and parts[0] == "api":
        rest = parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        rest = parts[3:]
    else:
        return None
    own = len(rest) == 3 and rest[2] in NAMESPACE_SUBRESOURCES
    return rest[2:] if rest[0] == "namespaces" and len(rest) >= 3 and not own else rest


def classify(method: str, url: str) -> tuple[str, str]:
    """(verb, resource) of one request: the resource is the plural, with a subresource as
    "pods/eviction"; never a name or a namespace, so the labels stay bounded."""
    split = urlsplit(url)
    rest = _resource_path(split.path)
    if rest is None:
        return method.lower(), "discovery"
    named = len(rest) >= 2
    resource = f"{rest[0]}/{rest[2]}" if len(rest) >= 3 else rest[0]
    method = method.upper()
    if method == "GET":
        watch = parse_qs(split.query).get("watch", [""])[0] in ("true", "1")
        verb = "watch" if watch else "get" if named else "list"
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = VERBS.get(method, method.lower())
    return verb, resource


def counted(request: Callable[..., Any]) -> Callable[..., Any]:
    """`request` (the REST layer's) counting each call once, with the answer's status
    code, or "error" when no answer came (refused, reset, timed out)."""

    def call(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb, resource = classify(method, url)
        try:
            response = request(method, url, *args, **kwargs)
        except BaseException as error:
            status = getattr(error, "status", None)
            metrics.report_api_request(verb, resource, str(status) if status else "error")
            raise
        metrics.report_api_request(verb, resource, str(getattr(response, "status", "error")))
        return response

    return call
