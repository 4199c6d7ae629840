"""The admission webhook's serving certificate, managed by the operator itself.

As Kueue's internal certificate management does: a CA and a serving certificate live in
one Secret the chart creates empty (so the role needs no Secret `create`, only `get` and
`update` of that one name); every replica serves with what the Secret holds, the first
one to find it empty or expiring fills it (a conflict means another replica did: read
theirs), and each puts the CA into the webhook configuration's `caBundle`, again only
that one name. Nothing here needs cert-manager, and GitOps tools see a configuration
that only ever changes in `caBundle`.
"""

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from trainwarden import logs
from trainwarden.adapters.kube_client import FIELD_MANAGER

log = logs.get(__name__)
CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=365)
RENEW_BEFORE = dt.timedelta(days=30)
"""A serving certificate with less than this left is replaced (the CA stays)."""
KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
TIMEOUT = (10, 30)


@dataclass(frozen=True)
class Bundle:
    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def new_ca(now: dt.datetime) -> tuple[bytes, bytes]:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("trainwarden-webhook-ca"))
        .issuer_name(_name("trainwarden-webhook-ca"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem(key)


def new_serving(
    ca_cert: bytes, ca_key: bytes, names: Sequence[str], now: dt.datetime
) -> tuple[bytes, bytes]:
    """A serving certificate for `names` (DNS names, or IP addresses) signed by the CA."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + SERVING_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(signer, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pem(key)


def _private(pem: bytes) -> PrivateKeyTypes:
    return serialization.load_pem_private_key(pem, password=None)


def _pairs(cert: x509.Certificate, key: PrivateKeyTypes) -> bool:
    """Whether `key` is the private half of the certificate's public key."""
    public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(*public) == cert.public_key().public_bytes(*public)


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def usable(bundle: Bundle, names: Sequence[str], now: dt.datetime) -> bool:
    """The serving certificate signed by the Secret's CA (its signature checked, not its
    issuer's name), its key the certificate's own and the CA key the CA's own (renewals
    are signed with it), valid now and for RENEW_BEFORE more, for every name. Anything
    else, a replaced CA or key included, is re-issued."""
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        cert.verify_directly_issued_by(ca)
        key, ca_key = _private(bundle.key), _private(bundle.ca_key)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    covered = {str(n) for n in sans.get_values_for_type(x509.DNSName)}
    covered |= {str(n) for n in sans.get_values_for_type(x509.IPAddress)}
    return (
        _pairs(cert, key)
        and _pairs(ca, ca_key)
        and _is_ca(ca)
        and cert.not_valid_before_utc <= now
        and cert.not_valid_after_utc - now > RENEW_BEFORE
        and ca.not_valid_before_utc <= now
        and ca.not_valid_after_utc > cert.not_valid_after_utc
        and set(names) <= covered
    )


def renewed(previous: Bundle | None, names: Sequence[str], now: dt.datetime) -> Bundle:
    """A bundle with a fresh serving certificate, keeping a still-valid CA."""
    if previous is not None and _ca_valid(previous, now):
        ca_cert, ca_key = previous.ca_cert, previous.ca_key
    else:
        ca_cert, ca_key = new_ca(now)
    cert, key = new_serving(ca_cert, ca_key, names, now)
    return Bundle(ca_cert, ca_key, cert, key)


def _ca_valid(bundle: Bundle, now: dt.datetime) -> bool:
    """A CA that can sign the next serving certificate: its key its own (an EC key, as
    new_serving signs with), valid now and for a whole serving certificate more."""
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        key = _private(bundle.ca_key)
    except (ValueError, TypeError):
        return False
    return (
        isinstance(key, ec.EllipticCurvePrivateKey)
        and _pairs(ca, key)
        and _is_ca(ca)
        and ca.not_valid_before_utc <= now
        and ca.not_valid_after_utc - now > SERVING_VALIDITY
    )


# --- the Secret and the webhook configuration ------------------------------------------


def _bundle(secret: client.V1Secret) -> Bundle | None:
    data = secret.data or {}
    if not all(k in data for k in KEYS):
        return None
    raw = [base64.b64decode(data[k]) for k in KEYS]
    return Bundle(*raw)


def ensure(api: client.ApiClient, namespace: str, name: str, names: Sequence[str]) -> Bundle:
    """The bundle in the Secret, filled or renewed first if it must be. Blocking."""
    core = client.CoreV1Api(api)
    for _ in range(3):
        secret = core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
        now = dt.datetime.now(dt.UTC)
        found = _bundle(secret)
        if found is not None and usable(found, names, now):
            return found
        fresh = renewed(found, names, now)
        secret.data = {
            k: base64.b64encode(v).decode()
            for k, v in zip(KEYS, (fresh.ca_cert, fresh.ca_key, fresh.cert, fresh.key), strict=True)
        }
        try:  # replace carries the resourceVersion read: another replica's write wins
            core.replace_namespaced_secret(
                name, namespace, secret, field_manager=FIELD_MANAGER, _request_timeout=TIMEOUT
            )
        except ApiException as error:
            if error.status == 409:
                continue
            raise
        log.info("webhook certificate issued", secret=f"{namespace}/{name}", names=list(names))
        return fresh
    raise RuntimeError(f"Secret {namespace}/{name} kept changing while being filled")


def inject(api: client.ApiClient, configuration: str, ca_cert: bytes) -> bool:
    """Put the CA into every webhook of the named MutatingWebhookConfiguration; whether
    anything changed. Blocking."""
    admission = client.AdmissionregistrationV1Api(api)
    found = admission.read_mutating_webhook_configuration(configuration, _request_timeout=TIMEOUT)
    bundle = base64.b64encode(ca_cert).decode()
    patch = [
        {"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
        for i, hook in enumerate(found.webhooks or [])
        if hook.client_config.ca_bundle != bundle
    ]
    if not patch:
        return False
    names = [{"op": "test", "path": f"/webhooks/{i}/name", "value": h.name}
             for i, h in enumerate(found.webhooks or [])]  # fmt: skip
    admission.patch_mutating_webhook_configuration(
        configuration, names + patch, field_manager=FIELD_MANAGER, _request_timeout=TIMEOUT
    )
    log.info("webhook caBundle injected", configuration=configuration)
    return True
