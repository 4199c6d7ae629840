"""`trainwarden doctor`: after an install, is everything the operator needs there?

One line per check, PASS, WARN or FAIL, with what was found and where the fix is written
(docs/install.md, "doctor"). Exit 0 when nothing failed (warnings alone included), 1 when
something did, 3 when the cluster cannot be reached or refuses the doctor's reads.
"""

import argparse
import sys
from collections import Counter
from typing import TYPE_CHECKING

from trainwarden import cluster_access, output
from trainwarden.api.v1alpha1.efficiency import DEFAULT_UTILIZATION_QUERY

if TYPE_CHECKING:
    from trainwarden.doctor.checks import Check


def _doctor(args: argparse.Namespace) -> int:
    from trainwarden.doctor import checks
    from trainwarden.doctor.probe import Options, Probe

    cluster_access.load(args.kubeconfig, args.context)
    probe = Probe(
        Options(
            args.namespace,
            args.prometheus_url,
            args.probe_namespace,
            args.request_timeout,
            args.dcgm_query,
            args.release,
            args.dcgm_namespace,
        )
    )
    try:
        deployment = probe.operator()
    except LookupError as error:
        found = [checks.Check("operator", "FAIL", str(error), checks.fix("operator"))]
        return _print(found, args.output)
    flags = checks.operator_args(deployment)
    url = args.prometheus_url or checks.flag(flags, "--prometheus-url")
    prometheus = probe.prometheus(url)
    found = [
        checks.operator(deployment),
        prometheus,
        probe.dcgm(url, prometheus.status == "PASS"),
        probe.kueue(),
        probe.crds(),
        probe.webhook(flags),
        probe.rbac(deployment),
        probe.clock(),
    ]
    return _print(found, args.output)


def _print(found: "list[Check]", form: str) -> int:
    from trainwarden.doctor import checks

    code = checks.exit_code(found)
    counts = Counter(c.status for c in found)
    if form in output.FORMATS:
        document = {"checks": [c.row() for c in found], "exitCode": code}
        sys.stdout.write(output.document(document, form))
        return code
    width = max(len(c.name) for c in found)
    for c in found:
        line = f"{c.status:<4}  {c.name:<{width}}  {c.found}"
        print(
            line + (f"\n      {'':<{width}}  fix: {c.fix}" if c.fix and c.status != "PASS" else "")
        )
    print(
        f"{len(found)} checks: {counts['PASS']} pass, {counts['WARN']} warn, "
        f"{counts['FAIL']} fail (exit {code}: warnings alone exit 0)"
    )
    return code


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check an installation: Prometheus, DCGM series, Kueue, CRDs, webhook, RBAC, clock",
        description=__doc__,
    )
    cluster_access.add_flags(doctor)
    cluster_access.add_timeout(doctor)
    doctor.add_argument(
        "--namespace", "-n", default="trainwarden-system", help="the release's namespace"
    )
    doctor.add_argument(
        "--release",
        help="the Helm release (its app.kubernetes.io/instance label), when the namespace "
        "holds several",
    )
    doctor.add_argument(
        "--prometheus-url",
        help="query this Prometheus instead of the operator's --prometheus-url (e.g. through "
        "`kubectl port-forward` when that URL resolves only inside the cluster)",
    )
    doctor.add_argument(
        "--dcgm-query",
        default=DEFAULT_UTILIZATION_QUERY,
        help="the per-accelerator utilization series to match to pods (default: "
        f"{DEFAULT_UTILIZATION_QUERY}, an IdleReclaimPolicy's default signal.query)",
    )
    doctor.add_argument(
        "--dcgm-namespace",
        help="match only this namespace's running accelerator pods and series (a team's "
        "view; default: every namespace)",
    )
    doctor.add_argument(
        "--probe-namespace",
        default="default",
        help="where the webhook probe's dry-run pod is created (nothing is stored); one the "
        "webhook's namespaceSelector does not exclude",
    )
    doctor.add_argument("--output", "-o", choices=["table", "json", "yaml"], default="table")
    doctor.set_defaults(func=_doctor)
