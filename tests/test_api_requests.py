"""trainwarden_api_requests_total: every request of the official client counted once, by
verb, resource and code, with no name or namespace in its labels (issue 30)."""

import json
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client
from prometheus_client import REGISTRY

from httpserve import serving
from trainwarden.adapters.api_requests import classify
from trainwarden.adapters.kube_client import named_client

SEEN: list[tuple[str, str]] = []


class _Api(BaseHTTPRequestHandler):
    """Answers every request with an empty object (404 for a name with "missing")."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        SEEN.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        code = 404 if "missing" in self.path else 200
        body = json.dumps({"kind": "Status", "code": code} if code == 404 else {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _answer

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[client.ApiClient]:
    with serving(_Api) as url:
        default = client.Configuration()
        default.host = url
        monkeypatch.setattr(client.Configuration, "_default", default)
        SEEN.clear()
        yield named_client()


def _counts() -> Counter[tuple[str, str, str]]:
    found: Counter[tuple[str, str, str]] = Counter()
    for family in REGISTRY.collect():
        if family.name != "trainwarden_api_requests":
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                key = (s.labels["verb"], s.labels["resource"], s.labels["code"])
                found[key] += int(s.value)
    return found


def test_each_request_moves_its_count_by_exactly_one(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    raw: dict[str, Any] = {"_preload_content": False}
    before = _counts()
    core.read_namespaced_pod("p1", "team-a", **raw)
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("missing", "team-a", **raw)
    core.list_pod_for_all_namespaces(limit=500, **raw)  # an informer's list
    core.list_pod_for_all_namespaces(watch=True, resource_version="7", **raw)  # its watch
    core.patch_namespaced_pod_status("p1", "team-a", {"status": {}}, **raw)
    core.create_namespaced_pod_eviction("p1", "team-a", {"metadata": {"name": "p1"}}, **raw)
    core.delete_namespaced_pod("p2", "team-b", **raw)
    core.read_namespace("team-a", **raw)
    core.patch_namespace_status("team-a", {"status": {}}, **raw)
    client.CoordinationV1Api(api).replace_namespaced_lease(
        "trainwarden", "trainwarden-system", {"metadata": {"name": "trainwarden"}}, **raw
    )
    client.CustomObjectsApi(api).list_cluster_custom_object(
        "trainwarden.io", "v1alpha1", "trainingbudgets", **raw
    )
    client.VersionApi(api).get_code(**raw)
    moved = _counts() - before
    assert moved == Counter(
        {
            ("get", "pods", "200"): 1,
            ("get", "pods", "404"): 1,
            ("list", "pods", "200"): 1,
            ("watch", "pods", "200"): 1,
            ("patch", "pods/status", "200"): 1,
            ("create", "pods/eviction", "200"): 1,
            ("delete", "pods", "200"): 1,
            ("get", "namespaces", "200"): 1,
            ("patch", "namespaces/status", "200"): 1,
            ("update", "leases", "200"): 1,
            ("list", "trainingbudgets", "200"): 1,
            ("get", "discovery", "200"): 1,
        }
    )
    assert sum(moved.values()) == len(SEEN)


def test_a_request_without_an_answer_is_counted_as_error(monkeypatch: pytest.MonkeyPatch) -> None:
    default = client.Configuration()
    default.host = "http://127.0.0.1:9"  # discard: nothing listens
    default.retries = 0
    monkeypatch.setattr(client.Configuration, "_default", default)
    core = client.CoreV1Api(named_client())
    before = _counts()
    with pytest.raises(Exception):  # noqa: B017, PT011 - urllib3's, whichever it is
        core.list_node(_request_timeout=1)
    assert _counts() - before == Counter({("list", "nodes", "error"): 1})


NAME = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True).map(lambda s: f"n{s}")
PLURAL = st.sampled_from(["pods", "jobs", "leases", "trainingbudgets", "namespaces", "nodes"])
SUB = st.sampled_from(["status", "eviction", "scale", "finalize"])


@settings(max_examples=1000)
@given(
    group=st.sampled_from(["", "batch", "trainwarden.io", "coordination.k8s.io"]),
    namespace=st.none() | NAME,
    plural=PLURAL,
    name=st.none() | NAME,
    sub=st.none() | SUB,
    method=st.sampled_from(["GET", "POST", "PATCH", "PUT", "DELETE"]),
    watch=st.booleans(),
)
def test_labels_name_the_resource_never_a_name_or_namespace(
    group: str,
    namespace: str | None,
    plural: str,
    name: str | None,
    sub: str | None,
    method: str,
    watch: bool,
) -> None:
    if plural == "namespaces":
        namespace = None  # a Namespace is cluster-scoped, its subresources these two
        sub = sub if sub in ("status", "finalize") else None
    if name is None:
        sub = None  # a subresource belongs to one object
    prefix = f"/apis/{group}/v1" if group else "/api/v1"
    path = prefix + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    path += (f"/{name}" if name else "") + (f"/{sub}" if sub else "")
    query = "?watch=true&resourceVersion=1" if watch else "?limit=500"
    verb, resource = classify(method, f"https://10.0.0.1:6443{path}{query}")
    assert resource == (f"{plural}/{sub}" if sub else plural)
    expected = {"POST": "create", "PATCH": "patch", "PUT": "update"}.get(method)
    if method == "GET":
        expected = "watch" if watch else ("get" if name else "list")
    if method == "DELETE":
        expected = "delete" if name else "deletecollection"
    assert verb == expected
