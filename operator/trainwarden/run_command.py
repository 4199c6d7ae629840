"""`trainwarden run`: the operator's flags, checked, into runtime.Settings.

Its own module, not more of cli.py: the operator's flags outnumber all the other
commands' together, and cli.py stays the short list of commands.
"""

import argparse
import json
import re
import sys
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from trainwarden import cluster_access
from trainwarden.api.v1alpha1.names import INSTANCE_LABEL

if TYPE_CHECKING:
    from trainwarden.admission.webhook import WebhookSettings


def _label_value(value: str) -> str:
    """An --instance is matched against a label value: it must be one."""
    if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid label value")
    return value


def _file(value: str) -> Path:
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"{value}: no such file")
    return Path(value)


def status_interval(value: str) -> timedelta:
    """--status-interval: a duration from 10 s to 1 h."""
    found = duration(value)
    if not timedelta(seconds=10) <= found <= timedelta(hours=1):
        raise argparse.ArgumentTypeError(f"{value}: must be from 10s to 1h")
    return found


def duration(value: str) -> timedelta:
    """A --since or --receipt-* duration ("90d", "10m")."""
    from trainwarden.api.v1alpha1.types import parse_duration

    try:
        return parse_duration(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _webhook(args: argparse.Namespace) -> "WebhookSettings | None":
    """The webhook's settings, if it is served; ValueError for flags that do not fit."""
    from trainwarden.admission.webhook import WebhookSettings

    if args.webhook_client_name and not args.webhook_client_ca:
        raise ValueError("--webhook-client-name needs --webhook-client-ca")
    if not 0 < args.webhook_timeout <= 30:
        raise ValueError("--webhook-timeout is 1 to 30 seconds")
    if not args.webhook_port:
        return None
    secret_namespace, _, secret = args.webhook_secret.rpartition("/")
    return WebhookSettings(
        port=args.webhook_port,
        address=args.webhook_address,
        secret=(secret_namespace or args.lease_namespace, secret),
        configuration=args.webhook_configuration,
        names=tuple(args.webhook_name or ("localhost", "127.0.0.1")),
        timeout=args.webhook_timeout,
        client_ca=args.webhook_client_ca,
        client_names=tuple(args.webhook_client_name or ()),
    )


def _run(args: argparse.Namespace) -> int:
    from trainwarden import failpoints
    from trainwarden.checkpoints.pruner import PrunerSettings
    from trainwarden.process import run
    from trainwarden.receipts.reconcile import ReceiptSettings
    from trainwarden.runtime import Settings

    pruner = None
    if args.pruner_image:
        tolerations = json.loads(args.pruner_tolerations) if args.pruner_tolerations else []
        if not isinstance(tolerations, list):
            print("trainwarden run: --pruner-tolerations must be a JSON list", file=sys.stderr)
            return cluster_access.USAGE
        try:
            pruner = PrunerSettings(args.pruner_image, args.pruner_run_as_user, tuple(tolerations))
        except ValueError as error:
            print(f"trainwarden run: {error}", file=sys.stderr)
            return cluster_access.USAGE
    namespace, _, name = (args.kill_switch or "").rpartition("/")
    seal_namespace, _, seal = args.receipt_seal_secret.rpartition("/")
    try:
        webhook = _webhook(args)
        armed = failpoints.parse(args.failpoint)
    except ValueError as error:
        print(f"trainwarden run: {error}", file=sys.stderr)
        return cluster_access.USAGE

    run(
        Settings(
            metrics_address=args.metrics_address,
            metrics_port=args.metrics_port,
            health_address=args.health_address,
            health_port=args.health_port,
            log_level=args.log_level,
            prometheus_url=args.prometheus_url,
            leader_election=args.leader_election,
            lease_name=args.lease_name,
            lease_namespace=args.lease_namespace,
            pruner=pruner,
            kill_switch=(namespace or args.lease_namespace, name) if name else None,
            instance=args.instance,
            volume_reclaim=args.volume_reclaim,
            status_interval=args.status_interval,
            failpoints=tuple(armed.items()),
            webhook=webhook,
            kubeconfig=args.kubeconfig,
            context=args.context,
            receipts=ReceiptSettings(
                ttl=args.receipt_ttl,
                per_namespace=args.receipts_per_namespace,
                query=args.receipt_query,
                resolution=args.receipt_resolution,
                checkpoint_wait=args.receipt_checkpoint_wait,
                seal=(seal_namespace or args.lease_namespace, seal),
            ),
        )
    )
    return cluster_access.OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = sub.add_parser("run", help="run the operator against the kubeconfig's cluster")
    cluster_access.add_flags(run)
    run.add_argument("--metrics-address", default="0.0.0.0")  # noqa: S104
    run.add_argument("--metrics-port", type=int, default=8080)
    run.add_argument("--health-address", default="0.0.0.0")  # noqa: S104
    run.add_argument("--health-port", type=int, default=8081)
    run.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    _add_run_status(run)
    run.add_argument(
        "--prometheus-url",
        help="Prometheus with accelerator utilization (e.g. DCGM exporter metrics); "
        "without it no pod is judged idle",
    )
    run.add_argument(
        "--leader-election",
        action="store_true",
        help="act only while holding a coordination.k8s.io Lease (run several replicas)",
    )
    run.add_argument("--lease-name", default="trainwarden")
    run.add_argument("--lease-namespace", default="default", help="usually the operator's own")
    run.add_argument(
        "--kill-switch",
        default="trainwarden-kill-switch",
        help='ConfigMap "[namespace/]name" (default namespace: --lease-namespace) whose '
        "data checkpointPruning: paused stops all checkpoint pruning",
    )
    run.add_argument(
        "--instance",
        type=_label_value,
        help=f"govern only policies labelled {INSTANCE_LABEL}=<INSTANCE>; without "
        "it, only policies without that label (so two operators never share a policy)",
    )
    run.add_argument(
        "--volume-reclaim",
        action="store_true",
        help="run the VolumeReclaimPolicy controller (it deletes PersistentVolumeClaims: "
        "the chart sets this only with volumeReclaim.enabled, which grants that verb)",
    )
    run.add_argument(
        "--failpoint",
        action="append",
        default=[],
        metavar="NAME=kill",
        help="fault-injection runs only (make faults): SIGKILL this process when it reaches "
        "the named point",
    )
    _add_run_pruner(run)
    _add_run_webhook(run)
    _add_run_receipts(run)
    run.set_defaults(func=_run)


def _add_run_pruner(run: argparse.ArgumentParser) -> None:
    from trainwarden.checkpoints.pruner import DEFAULT_UID

    run.add_argument(
        "--pruner-image",
        help="the trainwarden image pruner Jobs run (usually the operator's own); "
        "without it CheckpointPolicies do not prune PVCs",
    )
    run.add_argument(
        "--pruner-run-as-user",
        type=int,
        default=DEFAULT_UID,
        help="uid of pruner Jobs (never 0: they run as non-root): the trainers' uid, so "
        f"they may delete what trainers wrote (default: {DEFAULT_UID})",
    )
    run.add_argument("--pruner-tolerations", help="tolerations of pruner Jobs, a JSON list")


def _add_run_webhook(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--webhook-port",
        type=int,
        help="serve the admission webhook that holds new work of exhausted budgets on this "
        "port (TLS); without it nothing is held",
    )
    run.add_argument("--webhook-address", default="0.0.0.0")  # noqa: S104
    run.add_argument(
        "--webhook-secret",
        default="trainwarden-webhook",
        help='"[namespace/]name" of the Secret holding the webhook\'s certificate and CA '
        "(default namespace: --lease-namespace); the operator fills and renews it",
    )
    run.add_argument(
        "--webhook-configuration",
        help="the MutatingWebhookConfiguration whose caBundle the operator keeps current",
    )
    run.add_argument(
        "--webhook-name",
        action="append",
        help="a DNS name or IP the certificate is valid for (repeat; default: localhost, "
        "127.0.0.1); the chart passes the Service's names",
    )
    run.add_argument(
        "--webhook-timeout",
        type=float,
        default=2.0,
        help="the webhook configuration's timeoutSeconds (default 2): every review is "
        "answered within 3/4 of it, allowed unchanged if not decided by then",
    )
    run.add_argument(
        "--webhook-client-ca",
        type=_file,
        help="PEM CA certificates: serve only clients (the API server) presenting a "
        "certificate they signed; others are refused at the TLS handshake",
    )
    run.add_argument(
        "--webhook-client-name",
        action="append",
        help="with --webhook-client-ca: the client certificate's common name or a DNS "
        "name in it must be this (repeat for several)",
    )


def _add_run_status(run: argparse.ArgumentParser) -> None:
    from trainwarden.controllers.status import STATUS_INTERVAL

    run.add_argument(
        "--status-interval",
        type=status_interval,
        default=STATUS_INTERVAL,
        help="how long a policy's status may lag while only the clock moves its figures "
        "(a budget's used, percent, efficiency): 10s to 1h, default 5m, as the kubelet's "
        "node status; what a reader acts on is written at once. Shorter costs a status "
        "write per policy per interval",
    )


def _add_run_receipts(run: argparse.ArgumentParser) -> None:
    from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY

    run.add_argument(
        "--receipt-ttl",
        type=duration,
        default=timedelta(days=90),
        help="how long a RunReceipt is kept (default 90d)",
    )
    run.add_argument(
        "--receipts-per-namespace",
        type=int,
        default=500,
        help="RunReceipts kept per namespace at most, the oldest removed first (default 500)",
    )
    run.add_argument(
        "--receipt-query",
        default=DEFAULT_UTILIZATION_QUERY,
        help="per-accelerator utilization (0-100) with namespace and pod labels, for the "
        "used and idle accelerator-hours of receipts",
    )
    run.add_argument(
        "--receipt-resolution",
        type=duration,
        default=timedelta(seconds=60),
        help="the step of a receipt's utilization query: at least the scrape interval",
    )
    run.add_argument(
        "--receipt-checkpoint-wait",
        type=duration,
        default=timedelta(minutes=10),
        help="how long a receipt waits for a CheckpointPolicy to scan the run's checkpoint "
        "location after its last failure or suspension, or its finish (default 10m): until "
        "then a checkpoint written just before it is unseen, the loss only an upper bound, "
        "and the trainer's result an earlier checkpoint's",
    )
    run.add_argument(
        "--receipt-seal-secret",
        default="trainwarden-receipt-seal",
        help='"[namespace/]name" of the Secret holding the key that seals this operator\'s '
        "RunReceipts (default namespace: --lease-namespace); the operator fills it in when "
        "it holds no key (docs/receipts.md)",
    )
