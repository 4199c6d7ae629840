"""`trainwarden estimate`'s shell: reads the manifests and budget files, or the cluster's
budgets and namespaces, and hands them to the pure estimates module.

Its own module, not more of cli.py: the command has more I/O than the others (files,
directories, stdin, a kubeconfig), and cli.py stays the short list of commands.
"""

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from trainwarden import cluster_access, output
from trainwarden.api.v1alpha1.types import MANAGED_BY


def _labels(value: str) -> dict[str, str]:
    """--namespace-labels k=v,k2=v2."""
    labels = {}
    for pair in filter(None, value.split(",")):
        key, sep, val = pair.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{pair!r} is not key=value")
        labels[key.strip()] = val.strip()
    return labels


def _read(source: str) -> list[tuple[str, str]]:
    """(name, text) of a file, of the YAML/JSON files of a directory, or of stdin ("-")."""
    if source == "-":
        return [("stdin", sys.stdin.read())]
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        return [(str(p), p.read_text()) for p in files]
    return [(source, path.read_text())]


def _cluster(
    args: argparse.Namespace,
) -> tuple[Callable[[str], dict[str, str]], list[Mapping[str, Any]], str]:
    """Budgets cluster-wide, a function reading a namespace's labels, and the default
    namespace (the kubeconfig context's)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    cluster_access.load(args.kubeconfig, args.context)
    namespace: str | None = args.namespace
    labels: dict[str, str] | None = args.namespace_labels
    if namespace is None:
        try:
            contexts, active = config.list_kube_config_contexts(
                config_file=cluster_access.paths(args.kubeconfig)
            )  # type: ignore[no-untyped-call]
            chosen = next((c for c in contexts if c.get("name") == args.context), active)
            namespace = (chosen or {}).get("context", {}).get("namespace")
        except config.ConfigException:  # in-cluster configuration: no contexts
            namespace = None
    found = cast(
        dict[str, Any],
        client.CustomObjectsApi().list_cluster_custom_object(
            "trainwarden.dev", "v1alpha1", "trainingbudgets", _request_timeout=args.request_timeout
        ),
    )
    core = client.CoreV1Api()

    def namespace_labels(name: str) -> dict[str, str]:
        if labels is not None:
            return labels
        try:
            meta = core.read_namespace(name, _request_timeout=args.request_timeout).metadata
            return dict((meta.labels if meta else None) or {})
        except ApiException as error:
            why = "does not exist" if error.status == 404 else f"unreadable ({error.reason})"
            print(
                f"trainwarden estimate: namespace {name} {why}: only its name label is "
                "known (--namespace-labels sets them)",
                file=sys.stderr,
            )
            return {}

    return namespace_labels, list(found.get("items") or []), namespace or "default"


Sources = tuple[Sequence[Mapping[str, Any]], dict[str, dict[str, str]], str, str]


def _sources(args: argparse.Namespace, manifests: Sequence[Any]) -> Sources:
    """Budgets, labels per target namespace, the default namespace, and where budgets
    came from: files (never a cluster call), else the cluster."""
    from trainwarden import estimate_inputs as inputs

    if args.budgets:
        budgets = [b for f in args.budgets for n, t in _read(f) for b in inputs.load_budgets(t, n)]
        default = args.namespace or "default"
        targets = {inputs.namespace_of(m, default) for m in manifests}
        labels = inputs.offline_labels(targets, args.namespace_labels or {})
        return budgets, labels, default, ", ".join(args.budgets)
    read_labels, budgets, default = _cluster(args)
    labels = {}
    for ns in sorted({inputs.namespace_of(m, default) for m in manifests}):
        labels |= inputs.offline_labels([ns], read_labels(ns))
    return budgets, labels, default, "the cluster"


def _receipts(args: argparse.Namespace, namespaces: Iterable[str]) -> list[Mapping[str, Any]]:
    """The operator's RunReceipts in the target namespaces (the repeat check's ledger);
    none, said on stderr, where they cannot be read (namespace RBAC without the view)."""
    from kubernetes import client

    api, found = client.CustomObjectsApi(), cast(list[Mapping[str, Any]], [])
    for ns in sorted(set(namespaces)):
        token = None
        try:
            while True:
                page = api.list_namespaced_custom_object(
                    "trainwarden.dev",
                    "v1alpha1",
                    ns,
                    "runreceipts",
                    label_selector=f"{MANAGED_BY}=trainwarden",
                    limit=500,
                    _request_timeout=args.request_timeout,
                    **({"_continue": token} if token else {}),
                )
                listed = cast(dict[str, Any], page)
                found += listed.get("items") or []
                token = (listed.get("metadata") or {}).get("continue")
                if not token:
                    break
        except Exception as error:  # forbidden, no CRD: the estimate stands without it
            why = " ".join((cluster_access.failure(error) or type(error).__name__).split())
            said = f"RunReceipts in {ns} not read ({why[:200]}): repeats not checked"
            print(f"trainwarden estimate: {said}", file=sys.stderr)
    return found


def _cluster_error(error: Exception) -> str:
    what = cluster_access.failure(error) or f"{type(error).__name__}: {error}"
    return (
        f"cannot read TrainingBudgets from the cluster: {' '.join(what.split())[:400]} "
        "(offline: --budgets FILE --namespace-labels k=v)"
    )


def run(args: argparse.Namespace) -> int:
    """Exit 2 for input it cannot read, 3 for no cluster to read budgets from, 1 with
    --fail-over when a workload would use more than that share of a budget, else 0."""
    from datetime import UTC, datetime

    from trainwarden import estimate_inputs as inputs
    from trainwarden import estimates

    try:
        manifests = [
            m for f in args.filename for name, text in _read(f) for m in inputs.load(text, name)
        ]
        for m in manifests:  # before any cluster call: bad input fails fast and offline
            inputs.check(m)
        budgets, labels, default, source = _sources(args, manifests)
        now = datetime.now(UTC)
        receipts = [] if args.budgets else _receipts(args, labels)
        built = estimates.build(
            manifests,
            budgets,
            labels,
            default_namespace=default,
            now=now,
            budget_source=source,
            receipts=receipts,
        )
    except (OSError, ValueError) as error:  # InputError, unreadable files, not UTF-8
        print(f"trainwarden estimate: {error}", file=sys.stderr)
        return cluster_access.USAGE
    except Exception as error:  # the cluster: no kubeconfig, unreachable, forbidden
        print(f"trainwarden estimate: {_cluster_error(error)}", file=sys.stderr)
        return cluster_access.CLUSTER
    if args.output in output.FORMATS:
        sys.stdout.write(output.document(built, args.output))
    else:
        sys.stdout.write(estimates.table(built))
    if args.fail_over is not None and (found := estimates.over(built, args.fail_over)):
        for line in found:
            print(f"trainwarden estimate: over {args.fail_over:g}%: {line}", file=sys.stderr)
        return cluster_access.FINDINGS
    return cluster_access.OK


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Register `estimate` on the `trainwarden` command."""
    est = sub.add_parser(
        "estimate",
        help="what manifests will cost against the TrainingBudgets that would cover them",
        description="Estimate, before submitting, what workloads (Job, JobSet, Kubeflow jobs, "
        "RayJob, Pod, Kueue Workload) will cost: their accelerator-hours over the declared "
        "run time, the cost by each covering budget's rates, and the share of what is left "
        "of it. Budgets come from the cluster (the kubeconfig), or with --budgets from "
        "files, without any cluster (GitOps repositories, CI).",
    )
    est.add_argument(
        "--filename",
        "-f",
        action="append",
        required=True,
        help='a manifest (multi-document YAML or JSON), a directory of them, or "-" for '
        "stdin; repeat for more",
    )
    est.add_argument(
        "--budgets",
        action="append",
        default=[],
        metavar="FILE",
        help="TrainingBudgets from this YAML file or directory instead of the cluster "
        "(repeat); their status, if any, says what is left",
    )
    est.add_argument(
        "--namespace-labels",
        type=_labels,
        metavar="K=V,...",
        help="the target namespace's labels, instead of reading them from the cluster",
    )
    est.add_argument(
        "--namespace",
        "-n",
        help="where manifests without a namespace would be created (default: the "
        "kubeconfig context's namespace, else default)",
    )
    est.add_argument(
        "--fail-over",
        type=float,
        metavar="PERCENT",
        help="exit 1 if a workload would use more than PERCENT of what is left of a "
        "covering budget (for CI)",
    )
    est.add_argument("--output", "-o", choices=["table", "json", "yaml"], default="table")
    cluster_access.add_flags(est)
    cluster_access.add_timeout(est)
    est.set_defaults(func=run)
