"""The admission webhook's answers and its certificates, without a cluster (e2e runs the
server behind the real API server: e2e/test_admission.py)."""

import base64
import datetime as dt
import json
import ssl
import tempfile
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from trainwarden.admission import certs
from trainwarden.admission.review import review_response
from trainwarden.admission.view import NAMESPACES, AdmissionView
from trainwarden.api.v1alpha1.names import HELD_BY, INSTANCE_LABEL
from trainwarden.cache.cluster import namespace_facts
from trainwarden.core.keep import Keep
from trainwarden.testing.builders import BudgetBuilder, JobBuilder
from webhook_views import fed_view, unlisted

NOW = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.UTC)
TEAM = Keep(namespace_labels=frozenset({"team"}))


def budget(name: str, instance: str | None = None) -> dict[str, Any]:
    builder = BudgetBuilder(name).namespace_selector({"team": "a"}).accelerator_hours(1).enforce()
    if instance:
        builder = builder.labels({INSTANCE_LABEL: instance})
    body = builder.build()
    body["metadata"].update(uid=f"uid-{name}", generation=1)
    body["status"] = {"admission": {"holding": True, "holdUntil": "2026-12-04T12:05:00Z",
                                    "observedGeneration": 1}}  # fmt: skip
    return body


def view(*budgets: dict[str, Any], instance: str | None = None) -> AdmissionView:
    return fed_view(budgets, {"ns-a": {"team": "a"}}, instance)


def review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"request": {"uid": "r-1", "operation": operation, "namespace": "ns-a", "object": obj}}


def test_a_creation_in_a_holding_scope_gets_a_patch_and_a_warning() -> None:
    job = JobBuilder("train").build()  # no namespace in the body: the request's is used
    answer, outcome = review_response(review(job), view(budget("team")), NOW)
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"]))
    assert (outcome, response["uid"], response["allowed"]) == ("held", "r-1", True)
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch
    assert any(op["path"] == "/metadata/annotations" and op["value"][HELD_BY] == "team"
               for op in patch)  # fmt: skip
    assert "TrainingBudget team is exhausted" in response["warnings"][0]


def test_it_answers_allowed_unchanged_when_it_cannot_know() -> None:
    job = JobBuilder("train").build()
    answer, outcome = review_response(review(job), unlisted(), NOW)
    assert (outcome, answer["response"]) == ("unknown", {"uid": "r-1", "allowed": True})
    stale = view(budget("team"))
    stale.cache.interruptions.begin(NAMESPACES.name, NOW, "watch failed")
    assert review_response(review(job), stale, NOW)[1] == "unknown"
    assert review_response(review(job, "UPDATE"), view(budget("team")), NOW)[1] == "ignored"


def test_only_this_instances_budgets_hold() -> None:
    job = JobBuilder("train").build()
    assert review_response(review(job), view(budget("demo", "demo")), NOW)[1] == "allowed"
    held = review_response(review(job), view(budget("demo", "demo"), instance="demo"), NOW)
    assert held[1] == "held"


def test_a_namespace_relabelled_leaves_the_scope() -> None:
    v = view(budget("team"))
    sink = v.cache.namespace_sink()
    relabelled = namespace_facts({"metadata": {"name": "ns-a", "labels": {"team": "b"}}}, TEAM)
    sink.apply(NAMESPACES.name, "MODIFIED", "uid-ns-a", relabelled)
    assert review_response(review(JobBuilder("train").build()), v, NOW)[1] == "allowed"


def test_a_certificate_covers_its_names_and_is_renewed_from_the_same_ca() -> None:
    names = ("trainwarden-webhook.trainwarden.svc", "127.0.0.1")
    first = certs.renewed(None, names, NOW)
    assert certs.usable(first, names, NOW)
    assert not certs.usable(first, (*names, "other.svc"), NOW), "a name it does not cover"
    late = NOW + certs.SERVING_VALIDITY - certs.RENEW_BEFORE
    assert not certs.usable(first, names, late), "renewed a month before it expires"
    second = certs.renewed(first, names, late)
    assert second.ca_cert == first.ca_cert, "the caBundle stays the same"
    assert second.cert != first.cert
    assert certs.usable(second, names, late)
    cert = x509.load_pem_x509_certificate(second.cert)
    assert cert.issuer == x509.load_pem_x509_certificate(first.ca_cert).subject
    garbage = certs.Bundle(b"x", b"y", b"z", b"w")
    assert not certs.usable(garbage, names, NOW)
    assert certs.renewed(garbage, names, NOW).ca_cert != b"x", "an unreadable CA is replaced"


NAMES = ("trainwarden-webhook.trainwarden.svc", "127.0.0.1")
PARTS = ("ca_cert", "ca_key", "cert", "key")


@pytest.mark.parametrize("replaced", [m for n in range(1, 4) for m in combinations(PARTS, n)])
def test_a_replaced_ca_or_key_is_never_trusted_and_is_repaired(replaced: tuple[str, ...]) -> None:
    """Any part of the Secret replaced by another bundle's (a CA of the same name, a key
    that is not the certificate's): not usable, whatever the issuer's name says; the
    renewed bundle serves, its certificate signed by its CA, each key its certificate's."""
    ours, theirs = certs.renewed(None, NAMES, NOW), certs.renewed(None, NAMES, NOW)
    mixed = certs.Bundle(**{p: getattr(theirs if p in replaced else ours, p) for p in PARTS})
    assert not certs.usable(mixed, NAMES, NOW), f"{replaced} replaced and still trusted"
    fixed = certs.renewed(mixed, NAMES, NOW)
    assert certs.usable(fixed, NAMES, NOW)
    cert, ca = (x509.load_pem_x509_certificate(pem) for pem in (fixed.cert, fixed.ca_cert))
    cert.verify_directly_issued_by(ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:  # a key that is not the cert's fails here
        (Path(directory) / "tls.crt").write_bytes(fixed.cert)
        (Path(directory) / "tls.key").write_bytes(fixed.key)
        context.load_cert_chain(Path(directory) / "tls.crt", Path(directory) / "tls.key")
    if "ca_key" in replaced and "ca_cert" not in replaced:
        assert fixed.ca_cert not in (ours.ca_cert, theirs.ca_cert), "a CA without its key: new"


def test_a_certificate_is_used_only_within_its_validity() -> None:
    bundle = certs.renewed(None, NAMES, NOW)
    assert certs.usable(bundle, NAMES, NOW)
    assert not certs.usable(bundle, NAMES, NOW - dt.timedelta(hours=1)), "not yet valid"
    assert not certs.usable(bundle, NAMES, NOW + certs.SERVING_VALIDITY), "expired"
