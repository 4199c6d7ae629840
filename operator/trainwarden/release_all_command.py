"""`trainwarden release-all`: before an uninstall, release everything one operator instance
holds (uninstall.py decides what), so nothing stays held, gated, suspended or cordoned with
nobody left to release it. The chart's pre-delete hook runs it (--stop-operator first).

One line per release on stdout, an Event on each object and a log line; a second run finds
nothing and says so. Exit 0 when everything owed was released, 1 when some release was not
made (changed meanwhile, refused: the line says which; run it again), 3 for the cluster.
"""

import argparse
import asyncio
import itertools
import logging
import sys
from typing import TYPE_CHECKING, TextIO

from trainwarden import cluster_access, logs, uninstall
from trainwarden.api.v1alpha1.names import BUDGET_KIND, IDLE_KIND
from trainwarden.api.v1alpha1.types import API_VERSION as API
from trainwarden.output import document

if TYPE_CHECKING:
    from trainwarden.adapters.kube import JSON, Kube

log = logs.get(__name__)


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = sub.add_parser(
        "release-all",
        help="release everything an operator instance holds, suspended or cordoned "
        "(before an uninstall)",
        description=__doc__,
    )
    cluster_access.add_flags(cmd)
    cmd.add_argument(
        "--instance",
        help="the operator instance (its --instance); default: the unlabelled policies",
    )
    cmd.add_argument("--dry-run", action="store_true", help="change nothing, list what it would")
    cmd.add_argument(
        "--output",
        "-o",
        choices=["table", "json", "yaml"],
        default="table",
        help="table: one line per release as it is made; json, yaml: one document at the end",
    )
    cmd.add_argument(
        "--stop-operator",
        metavar="NAMESPACE/DEPLOYMENT",
        help="first scale the operator's Deployment to zero and wait for its pods to go, "
        "so nothing is held or suspended again after the release (the chart's hook)",
    )
    cmd.add_argument(
        "--stop-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the operator's pods to go (default 120)",
    )
    cmd.set_defaults(func=_release_all)


def _release_all(args: argparse.Namespace) -> int:
    from trainwarden.adapters.kube import Unreachable
    from trainwarden.adapters.kube_client import KubeClient, named_client

    logs.configure(stream=sys.stderr)
    # urllib3's retry warnings: an unreachable API server is the one line below, exit 3.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    cluster_access.load(args.kubeconfig, args.context)
    kube = KubeClient(named_client())
    try:
        return asyncio.run(run(kube, args))
    except Unreachable as error:
        print(f"trainwarden release-all: cannot reach the API server: {error}", file=sys.stderr)
        return cluster_access.CLUSTER


async def run(kube: "Kube", args: argparse.Namespace) -> int:
    """The command: the operator stopped first if asked (not in a dry run), then the release."""
    output = args.output
    if args.stop_operator and not args.dry_run:
        namespace, _, name = args.stop_operator.partition("/")
        said = sys.stdout if output == "table" else sys.stderr  # a document stays whole
        if not await stop_operator(kube, namespace, name, args.stop_timeout, said):
            return cluster_access.FINDINGS
    return await release_all(kube, args.instance, dry_run=args.dry_run, output=output)


async def stop_operator(kube: "Kube", namespace: str, name: str, wait: float, out: TextIO) -> bool:
    """Scale the operator's Deployment to zero and wait until none of its pods is left: a
    replica still running would hold or suspend again what is released."""
    deployment = await kube.get("apps/v1", "Deployment", namespace, name)
    if deployment is None:
        print(f"no Deployment {namespace}/{name}: no operator to stop", file=out)
        return True
    await kube.merge_patch(
        "apps/v1", "Deployment", namespace, name, {"spec": {"replicas": 0}}, subresource="scale"
    )
    match = ((deployment.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    try:
        async with asyncio.timeout(wait):
            for _ in itertools.count():  # a one-off command polls: it has no watch
                if not await kube.list("v1", "Pod", namespace=namespace, selector=selector):
                    break
                await asyncio.sleep(1.0)
    except TimeoutError:
        print(f"the operator's pods ({namespace}, {selector}) did not go in {wait:g} s", file=out)
        return False
    print(
        f"stopped the operator: Deployment {namespace}/{name} scaled to 0, its pods gone", file=out
    )
    log.info("operator stopped", object=f"Deployment/{namespace}/{name}")
    return True


async def listed(kube: "Kube") -> tuple[list["JSON"], ...]:
    """Budgets, idle policies, workloads of every suspendable kind served, pods, nodes."""
    from trainwarden.core.workloads import SUSPEND_FIELD

    workloads: list[JSON] = []
    for api_version, kind in sorted(SUSPEND_FIELD):
        workloads += await kube.list(api_version, kind)
    return (
        await kube.list(API, BUDGET_KIND),
        await kube.list(API, IDLE_KIND),
        workloads,
        await kube.list("v1", "Pod"),
        await kube.list("v1", "Node"),
    )


async def release_all(
    kube: "Kube",
    instance: str | None,
    *,
    dry_run: bool,
    out: TextIO | None = None,
    output: str = "table",
) -> int:
    """Release (or, dry, list) what `instance` owes, one line each on `out` (stdout) as it
    goes, or one document at the end (-o json|yaml); the exit code."""
    out = out or sys.stdout
    actions = uninstall.release(instance, *await listed(kube))
    who = f"instance {instance}" if instance else "the default instance"
    if not actions and output == "table":
        print(f"nothing to release: {who} holds, suspends and cordons nothing", file=out)
    done: list[dict[str, object]] = []
    failed = 0
    for action in actions:
        why = None if dry_run else await _act(kube, action)
        line = f"would {action}" if dry_run else str(action)
        result = "would" if dry_run else "released"
        if why is not None:
            failed, line, result = failed + 1, f"not done: {action}: {why}", "not done"
            log.warning("not released", object=action.target, policy=action.policy, why=why)
        elif not dry_run:
            await kube.event(
                dict(action.obj),
                type_="Normal",
                reason="ReleasedOnUninstall",
                message=uninstall.REASON,
                action="Release",
            )
            log.info("released", object=action.target, policy=action.policy, verb=action.verb)
        if output == "table":
            print(line, file=out)
        done.append({**action.entry(), "result": result} | ({"why": why} if why else {}))
    if output != "table":
        summary = {"instance": instance or "", "dryRun": dry_run, "releases": done}
        out.write(document(summary, output))
    return cluster_access.FINDINGS if failed else cluster_access.OK


async def _act(kube: "Kube", action: uninstall.Action) -> str | None:
    """Make one release on the version listed; None when done, else why not."""
    from trainwarden.adapters import workloads
    from trainwarden.adapters.kube import Conflict, Gone, Refused

    obj = dict(action.obj)
    meta = obj["metadata"]
    try:
        if action.kueue:
            return await _resume_kueue(kube, action)
        patch = uninstall.patch(action)
        if patch is None:
            await workloads.resume(kube, obj)
        else:
            await kube.merge_patch(
                obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], patch
            )
    except (Conflict, Gone, Refused) as error:
        return str(error) or type(error).__name__
    return None


async def _resume_kueue(kube: "Kube", action: uninstall.Action) -> str | None:
    """As the budget resumes a Kueue-managed workload (budget/enforce.py): reactivate its
    Workload if this budget deactivated it, then drop the job's marks; a Workload someone
    else deactivated stays as it is."""
    from trainwarden.adapters import workloads

    job = dict(action.obj)
    workload = await workloads.kueue_workload(kube, job)
    if workload is None:
        return "its Kueue Workload is not found"
    inactive = (workload.get("spec") or {}).get("active") is False
    if inactive and workloads.suspended_by(workload) != workloads.label_value(action.policy):
        return "its Kueue Workload was deactivated by someone else: left as it is"
    if inactive:
        await workloads.reactivate(kube, workload)
    meta = job["metadata"]
    fresh = await kube.get(job["apiVersion"], job["kind"], meta["namespace"], meta["name"])
    if fresh is not None and fresh["metadata"].get("uid") == meta.get("uid"):
        await workloads.unmark(kube, fresh)
    return None
