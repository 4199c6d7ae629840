"""Only the API server reaches the webhook (issue 25: the port answered any client).

The local API server presents a client certificate to webhooks (e2e/cluster/up.sh: an
admission configuration whose kubeConfigFile names `apiserver-webhook-client`, signed by
a CA of its own), and the operator runs with `--webhook-client-ca` set to that CA and
`--webhook-client-name` to its name. A client without a certificate, or with one another
CA signed (the cluster admin's), is refused at the TLS handshake, before any request is
read; the API server's own reviews are answered, and a Job of an exhausted budget is still
held.
"""

import base64
import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from harness import CLUSTER_DIR, Cluster, read_env
from test_admission import Webhook, exhaust, job_in, kubectl_create, served_webhook

CLIENT_NAME = "kube-apiserver-webhook-client"
"""The common name of the API server's webhook client certificate (up.sh)."""


@pytest.fixture(scope="module")
def webhook(
    cluster: Cluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Webhook]:
    env = read_env(CLUSTER_DIR / "cluster.env")
    assert "WEBHOOK_CLIENT_CA" in env, "a cluster from before webhook client certificates"
    extra = (
        f"--webhook-client-ca={env['WEBHOOK_CLIENT_CA']}",
        f"--webhook-client-name={CLIENT_NAME}",
    )
    with served_webhook(cluster, tmp_path_factory, "tw-auth", *extra) as hook:
        yield hook


def served_by_ca(cluster: Cluster, webhook: Webhook, tmp_path: Path) -> ssl.SSLContext:
    """A client context trusting the webhook's serving CA (its configuration's caBundle)."""
    admission = client.AdmissionregistrationV1Api(cluster.api)
    bundle = admission.read_mutating_webhook_configuration(webhook.configuration)
    ca = tmp_path / "webhook-ca.crt"
    ca.write_bytes(base64.b64decode(bundle.webhooks[0].client_config.ca_bundle))
    return ssl.create_default_context(cafile=str(ca))


def post(port: int, context: ssl.SSLContext) -> int:
    """A review posted as anyone could: the HTTP status, if it ever gets one."""
    review = {"kind": "AdmissionReview", "request": {"uid": "u-1", "operation": "CREATE"}}
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("POST", "/hold", json.dumps(review))
        return connection.getresponse().status
    finally:
        connection.close()


def refused(port: int, context: ssl.SSLContext) -> bool:
    """Whether the webhook hangs up right after the handshake, before any request (the
    TLS 1.3 client learns only then that its certificate was refused). A served client's
    connection stays open, waiting for its request."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        try:
            return tls.recv(1) == b""
        except ssl.SSLError:  # an alert, where the server's TLS sends one
            return True
        except TimeoutError:
            return False


def test_only_the_api_server_is_answered_and_work_is_still_held(
    cluster: Cluster, webhook: Webhook, namespace: str, tmp_path: Path
) -> None:
    pki = CLUSTER_DIR / "state" / "pki"
    anyone = served_by_ca(cluster, webhook, tmp_path)
    admin = served_by_ca(cluster, webhook, tmp_path)
    admin.load_cert_chain(pki / "admin.crt", pki / "admin.key")  # system:masters, another CA
    apiserver = served_by_ca(cluster, webhook, tmp_path)  # the control: the API server's cert
    apiserver.load_cert_chain(*(pki / f"apiserver-webhook-client.{x}" for x in ("crt", "key")))
    assert not refused(webhook.port, apiserver)
    assert post(webhook.port, apiserver) == 200
    for stranger in (anyone, admin):
        assert refused(webhook.port, stranger)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post(webhook.port, stranger)

    name = exhaust(cluster, namespace)  # its probes pass through the API server: answered
    printed = kubectl_create(cluster, job_in(namespace, "next"))
    assert f"TrainingBudget {name} is exhausted" in printed, printed
    held = client.BatchV1Api(cluster.api).read_namespaced_job("next", namespace)
    assert held.spec.suspend is True
    assert held.metadata.annotations["trainwarden.dev/held-by"] == name
    assert webhook.answered("held") >= 1
    assert webhook.answered("refused") == 0, "the API server's certificate names it"
