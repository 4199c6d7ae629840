"""What the doctor reads: the installed operator's Deployment and release, the API server
(discovery, CRDs, SubjectAccessReviews, a dry-run creation, its clock) and Prometheus.
Every verdict is checks.py's; a refusal of the doctor's own reads (401, 403) or an
unreachable API server is raised to the command (exit 3)."""

import functools
import http.client
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from trainwarden.api.v1alpha1.crd import KINDS, RECORDS, crd
from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY
from trainwarden.api.v1alpha1.names import DOCTOR_PROBE
from trainwarden.api.v1alpha1.types import DEFAULT_ACCELERATORS
from trainwarden.core import skew
from trainwarden.core.pods import effective_requests
from trainwarden.doctor import checks, grants, helm
from trainwarden.doctor.checks import Check

MAX_ANSWER = 64 * 2**20
"""Bytes of one Prometheus answer read at most, adapters/prometheus.py's bound. Its bounded
read is not reused: it is aiohttp's, inside a coroutine that counts each query in the
operator's own metrics; the doctor's two queries are synchronous urllib reads."""
JSON = dict[str, Any]
UNANSWERED = (OSError, ValueError, RecursionError, http.client.HTTPException)
"""What a Prometheus that is not one raises: refused, late, not HTTP (BadStatusLine),
not JSON, or nested too deep to parse."""
PAGE = 500
SMALL = {"cpu": "10m", "memory": "16Mi"}
"""The probe pod's requests and limits: a quota or LimitRange that requires them admits
it (nothing is stored: it counts against no quota)."""


@dataclass(frozen=True)
class Options:
    namespace: str
    prometheus_url: str | None
    probe_namespace: str
    timeout: float
    query: str = DEFAULT_UTILIZATION_QUERY
    release: str | None = None
    dcgm_namespace: str | None = None
    """Match only this namespace's pods and series (a team's view; None: the cluster's)."""


class Probe:
    """One doctor run's reads, each a few requests at most."""

    def __init__(self, options: Options) -> None:
        self.o = options
        self.api = client.ApiClient()

    def _response(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The HTTP response itself (urllib3's), unparsed: its headers are read too."""
        return call(*args, _preload_content=False, _request_timeout=self.o.timeout, **kwargs)

    def _raw(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> JSON:
        found: JSON = json.loads(self._response(call, *args, **kwargs).data)
        return found

    def operator(self) -> JSON:
        """The operator's Deployment in the release namespace (the chart's labels); a
        LookupError naming what to pass when there is none, or more than one."""
        apps = client.AppsV1Api(self.api)
        selector = "app.kubernetes.io/name=trainwarden"
        if self.o.release:
            selector += f",app.kubernetes.io/instance={self.o.release}"
        found = self._raw(
            apps.list_namespaced_deployment, self.o.namespace, label_selector=selector
        )
        items: list[JSON] = found.get("items") or []
        if len(items) == 1:
            return items[0]
        if not items:
            raise LookupError(
                f"no Deployment labelled {selector} in namespace {self.o.namespace} "
                "(pass the release's --namespace, and --release)"
            )
        names = ", ".join(sorted(str(d["metadata"]["name"]) for d in items))
        raise LookupError(
            f"{len(items)} trainwarden Deployments in namespace {self.o.namespace} ({names}): "
            "pass --release"
        )

    def prometheus(self, url: str | None) -> Check:
        if url is None:
            return checks.prometheus(None, None, None)
        try:
            return checks.prometheus(url, self._query(url, "vector(1)"), None)
        except UNANSWERED as error:
            return checks.prometheus(url, None, f"{type(error).__name__}: {error}")

    def _query(self, url: str, query: str) -> object:
        address = f"{url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        if not address.startswith(("http://", "https://")):
            raise ValueError(f"{url} is not an http(s) URL")
        with urllib.request.urlopen(address, timeout=self.o.timeout) as answer:  # noqa: S310
            body = answer.read(MAX_ANSWER + 1)
        if len(body) > MAX_ANSWER:
            raise ValueError(f"the answer exceeds {MAX_ANSWER} bytes")
        found: object = json.loads(body)
        return found

    def dcgm(self, url: str | None, reachable: bool) -> Check:
        query = self.o.query
        if url is None or not reachable:
            return checks.dcgm(query, None, "Prometheus is not configured or did not answer")
        try:
            answer = self._query(url, query)
        except UNANSWERED as error:
            return checks.dcgm(query, None, f"{type(error).__name__}: {error}")
        series = checks.series(answer)
        if series is None:
            return checks.dcgm(query, None, f"Prometheus answered {query} with no result list")
        within = self.o.dcgm_namespace
        return checks.dcgm(query, checks.matching(self._accelerator_pods(), series, within))

    def _accelerator_pods(self) -> Iterator[tuple[str, str]]:
        """The running pods that request an accelerator, listed PAGE at a time (a large
        cluster's pods in one answer are hundreds of megabytes)."""
        core = client.CoreV1Api(self.api)
        within = self.o.dcgm_namespace
        listing = functools.partial(core.list_namespaced_pod, within) if within else None
        token = None
        while True:
            page = self._raw(
                listing or core.list_pod_for_all_namespaces,
                field_selector="status.phase=Running",
                limit=PAGE,
                **({"_continue": token} if token else {}),
            )
            for pod in page.get("items") or []:
                spec = pod.get("spec") or {}
                if sum(effective_requests(spec, DEFAULT_ACCELERATORS).values()) > 0:
                    meta = pod.get("metadata") or {}
                    yield str(meta.get("namespace", "")), str(meta.get("name", ""))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def kueue(self) -> Check:
        groups = self._raw(client.ApisApi(self.api).get_api_versions).get("groups") or []
        versions = [
            str(v.get("version"))
            for g in groups
            if g.get("name") == "kueue.x-k8s.io"
            for v in g.get("versions") or []
        ]
        return checks.kueue(versions)

    def crds(self) -> Check:
        extensions = client.ApiextensionsV1Api(self.api)
        found: dict[str, list[str] | None] = {}
        for kind in (*KINDS, *RECORDS):
            want = crd(kind)
            try:
                got = self._raw(extensions.read_custom_resource_definition, kind.crd_name)
            except ApiException as error:
                if error.status != 404:
                    raise
                found[kind.crd_name] = None
                continue
            found[kind.crd_name] = checks.differences(_version(want), _version(got))
        return checks.crds(found)

    def webhook(self, args: list[str]) -> Check:
        name = checks.flag(args, "--webhook-configuration") or ""
        if not checks.flag(args, "--webhook-port"):
            return checks.webhook(checks.Webhook(False, name, None))
        admission = client.AdmissionregistrationV1Api(self.api)
        try:
            configuration = self._raw(admission.read_mutating_webhook_configuration, name)
        except ApiException as error:
            if error.status != 404:
                raise
            return checks.webhook(checks.Webhook(True, name, None))
        hooks = configuration.get("webhooks") or [{}]
        ca = bool((hooks[0].get("clientConfig") or {}).get("caBundle"))
        try:
            warnings = self._dry_run_probe()
        except ApiException as error:
            if error.status not in (401, 403):
                return checks.webhook(checks.Webhook(True, name, ca, error=_reason(error)))
            if not self._may_create_pods():
                raise
            refused = f"{error.status} {_reason(error)}"
            return checks.webhook(checks.Webhook(True, name, ca, _warnings(error), refused=refused))
        return checks.webhook(checks.Webhook(True, name, ca, warnings))

    def _may_create_pods(self) -> bool:
        """Whether this user may create pods in the probe's namespace: a refusal then comes
        from admission (quota, LimitRange, Pod Security, a policy engine), not RBAC."""
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=self.o.probe_namespace, resource="pods", verb="create"
                )
            )
        )
        authorization = client.AuthorizationV1Api(self.api)
        answer = self._raw(authorization.create_self_subject_access_review, review)
        return bool((answer.get("status") or {}).get("allowed"))

    def _dry_run_probe(self) -> tuple[str, ...]:
        """A server-side dry-run creation of a pod the webhook's rules match (nothing is
        stored, and sideEffects: None lets the API server call the webhook for it)."""
        core = client.CoreV1Api(self.api)
        response = self._response(
            core.create_namespaced_pod, self.o.probe_namespace, _probe_pod(), dry_run="All"
        )
        return tuple(response.headers.getlist("Warning"))

    def rbac(self, deployment: JSON) -> Check:
        spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
        account = (self.o.namespace, str(spec.get("serviceAccountName") or "default"))
        release = (
            (deployment.get("metadata") or {})
            .get("labels", {})
            .get("app.kubernetes.io/instance", "")
        )
        manifests, source, unverified = self._release_manifests(release)
        if manifests is None:
            manifests, source = self._live_roles(), "the roles bound in the cluster"
        wanted = grants.grants(manifests, account)
        denied = [g for g in wanted if not self._allowed(account, g)]
        return checks.rbac(account, source, wanted, denied, unverified)

    def _release_manifests(self, release: str) -> tuple[list[JSON] | None, str, str | None]:
        """The manifest Helm rendered for the deployed release (its release Secret), or
        why there is none to read."""
        core = client.CoreV1Api(self.api)
        secrets = (
            self._raw(
                core.list_namespaced_secret,
                self.o.namespace,
                label_selector=f"owner=helm,name={release},status=deployed",
            ).get("items")
            or []
        )
        if not secrets:
            return None, "", f"no deployed Helm release record of {release or '?'}"
        try:
            docs, number = helm.manifests(secrets)
        except helm.Unreadable as error:
            return None, "", f"its Helm release record is unreadable: {error}"
        return docs, f"Helm release {release} (revision {number})", None

    def _live_roles(self) -> list[JSON]:
        rbac = client.RbacAuthorizationV1Api(self.api)
        out: list[JSON] = []
        for kind, call in (
            ("ClusterRoleBinding", rbac.list_cluster_role_binding),
            ("ClusterRole", rbac.list_cluster_role),
            ("RoleBinding", rbac.list_role_binding_for_all_namespaces),
            ("Role", rbac.list_role_for_all_namespaces),
        ):
            out += [{**item, "kind": kind} for item in self._raw(call).get("items") or []]
        return out

    def _allowed(self, account: tuple[str, str], grant: grants.Grant) -> bool:
        resource, _, subresource = grant.resource.partition("/")
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=f"system:serviceaccount:{account[0]}:{account[1]}",
                groups=[
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{account[0]}",
                    "system:authenticated",
                ],
                resource_attributes=client.V1ResourceAttributes(
                    namespace=grant.namespace or None,
                    group=grant.group,
                    resource=resource,
                    subresource=subresource or None,
                    verb=grant.verb,
                    name=grant.name or None,
                ),
            )
        )
        answer = self._raw(client.AuthorizationV1Api(self.api).create_subject_access_review, review)
        return bool((answer.get("status") or {}).get("allowed"))

    def clock(self, answers: int = 3) -> Check:
        """The offset from the Date (whole seconds) of a few answers, each between when
        it was sent and received on this machine's clock, as the operator measures it."""
        samples = []
        for _ in range(answers):
            sent = time.time()
            response = self._response(client.VersionApi(self.api).get_code)
            received = time.time()
            date = parsedate_to_datetime(response.headers["Date"]).timestamp()
            samples.append(skew.Sample(sent, received, date))
        found = skew.estimate(samples)
        assert found is not None
        return checks.clock(found)


def _version(crd_doc: Mapping[str, Any]) -> JSON:
    """A CRD's trainwarden version, as far as the operator depends on it."""
    versions = (crd_doc.get("spec") or {}).get("versions") or []
    (version,) = [v for v in versions if v.get("name") == "v1alpha1"] or [{}]
    return {
        "served": version.get("served"),
        "schema": version.get("schema"),
        "subresources": version.get("subresources") or {},
    }


def _probe_pod() -> JSON:
    """A pod the Pod Security Standard "restricted" admits, marked for the webhook."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "trainwarden-doctor-", "annotations": {DOCTOR_PROBE: "1"}},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": SMALL, "limits": SMALL},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _warnings(error: ApiException) -> tuple[str, ...]:
    """The Warning headers of a refusal: the webhooks that answered before it."""
    getlist = getattr(error.headers, "getlist", None)
    return tuple(getlist("Warning")) if getlist is not None else ()


def _reason(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.reason)
