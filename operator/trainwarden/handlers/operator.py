"""kopf glue, and nothing else: log in with the operator's credentials, start and stop the
runtime, answer the liveness probe, and forward policy events to the controllers.

No handler stores anything on any object (no finalizers, no progress annotations): pods
and workloads are not watched through kopf at all but by the runtime's informers
(adapters/informer.py), which read and never write.
"""

import copy
from typing import Any, Protocol

import kopf
from kubernetes import client

from trainwarden.adapters.kube import JSON
from trainwarden.api.v1alpha1 import GROUP, VERSION
from trainwarden.api.v1alpha1.names import FINALIZER


class Controller(Protocol):
    def policy_event(self, event: str | None, body: JSON) -> None: ...


class Runtime(Protocol):
    """What the handlers need of the runtime (runtime.py), which imports them."""

    @property
    def budgets(self) -> Controller: ...

    @property
    def idle(self) -> Controller: ...

    @property
    def checkpoints(self) -> Controller: ...

    @property
    def volumes(self) -> Controller | None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def alive(self) -> dict[str, str | None]: ...


def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Only warnings and errors become Kubernetes Events through kopf's logger; trainwarden
    # posts its own deliberate Events for actions.
    settings.posting.level = 30
    # Server-side watch timeout below typical load-balancer idle cuts, and a client
    # timeout above it, so a silently stalled watch is noticed and restarted (kopf #585).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # Back off on API errors instead of hammering a struggling API server.
    settings.networking.error_backoffs = [1, 2, 5, 10, 30, 60]
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix="trainwarden.dev"
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="trainwarden.dev"
    )


def _login(**_: Any) -> kopf.ConnectionInfo:
    """kopf's connection from the configuration the runtime already loaded (once)."""
    conf = client.Configuration.get_default_copy()
    if conf.refresh_api_key_hook is not None:  # in-cluster: the projected token rotates
        conf.refresh_api_key_hook(conf)
    keys: dict[str, str] = conf.api_key or {}
    token = keys.get("authorization") or keys.get("BearerToken") or ""
    scheme, _sep, value = token.partition(" ")
    return kopf.ConnectionInfo(
        server=conf.host,
        ca_path=conf.ssl_ca_cert,
        insecure=not conf.verify_ssl,
        scheme=scheme or None,
        token=value or None,
        certificate_path=conf.cert_file,
        private_key_path=conf.key_file,
    )


def registry(runtime: Runtime) -> kopf.OperatorRegistry:
    """Every handler the operator runs, registered explicitly rather than by import."""
    reg = kopf.OperatorRegistry()
    kopf.on.login(registry=reg)(_login)
    kopf.on.startup(registry=reg)(_configure)

    @kopf.on.startup(registry=reg)
    async def start(**_: Any) -> None:
        await runtime.start()

    @kopf.on.cleanup(registry=reg)
    async def stop(**_: Any) -> None:
        await runtime.stop()

    @kopf.on.probe(registry=reg, id="controllers")
    def alive(**_: Any) -> dict[str, str | None]:
        return runtime.alive()

    for plural, controller in (
        ("trainingbudgets", runtime.budgets),
        ("idlereclaimpolicies", runtime.idle),
        ("checkpointpolicies", runtime.checkpoints),
        ("volumereclaimpolicies", runtime.volumes),  # only with --volume-reclaim
    ):
        if controller is None:
            continue
        kopf.on.event(GROUP, VERSION, plural, registry=reg, id=plural)(_forward(controller))
    return reg


def _forward(controller: Controller) -> Any:
    # async: kopf runs sync handlers in threads, and the controllers live on the loop.
    async def forward(type: str | None, body: kopf.Body, **_: Any) -> None:  # noqa: A002
        controller.policy_event(type, copy.deepcopy(dict(body)))

    return forward
