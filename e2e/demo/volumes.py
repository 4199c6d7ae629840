"""Scene: orphaned volumes. A VolumeReclaimPolicy in DryRun lists the one claim no pod
mounts (a pod mounts another, a third is protected); switched to Enforce it reports it
again, waits its grace period and deletes exactly that claim. Cleans up after itself; a
failure says why and the demo goes on."""

from typing import Any

from demo.shell import apply, demo_policy, get, kubectl, say, scene
from harness import simulated, wait_for
from trainwarden.testing.builders import NamespaceBuilder, PodBuilder
from trainwarden.testing.cluster import PersistentVolumeBuilder, PVCBuilder
from trainwarden.testing.volumes import VolumePolicyBuilder

NAMESPACE, NAME = "eval-scratch", "eval-scratch-orphans"
CLAIMS = ("scratch", "in-use", "precious")
"""The orphan; one a pod mounts; one labelled trainwarden.dev/protect."""


def run() -> None:
    say(f"Orphaned volumes: {NAME} reports {NAMESPACE}'s claims no pod has mounted for 1m")
    with scene("orphaned volumes", cleanup=_clean):
        _clean()
        _claims()
        policy = VolumePolicyBuilder(NAME).namespaces(NAMESPACE).unmounted_for("1m")
        print(apply(demo_policy(policy.grace("15s"))), end="")
        planned = wait_for(_planned, timeout=180, what="the DryRun plan")
        print(f"DryRun plans to delete: {', '.join(sorted(planned))}")
        _show_states()
        say(f"Switching {NAME} to Enforce: reported again, a 15 s grace period, then deleted")
        kubectl("patch", "vrp", NAME, "--type=merge", "-p", '{"spec":{"mode":"Enforce"}}')
        wait_for(_gone, timeout=180, what="the orphan's deletion")
        events = kubectl(
            "get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=scratch",
            "-o", "custom-columns=REASON:.reason,MESSAGE:.message", "--sort-by=.lastTimestamp",
        )  # fmt: skip
        print(events, end="")
        left = kubectl("get", "pvc", "-n", NAMESPACE, "-o", "name").split()
        print(f"the claims left, untouched: {' '.join(sorted(left))}")
        status = get("vrp", NAME)["status"]
        print(f"status: {status['claimsDeleted']} claim deleted, {status['bytesDeleted']} bytes")


def _claims() -> None:
    """Three claims bound to volumes reserved for them (reclaimPolicy Delete: Retain ones
    are never deleted), and a pod on a kwok node mounting one."""
    print(apply(NamespaceBuilder(NAMESPACE).build()), end="")
    for name in CLAIMS:
        volume = f"{NAMESPACE}-{name}"
        pv = PersistentVolumeBuilder(volume).size("1Gi").host_path(f"/tmp/{volume}")
        print(apply(pv.claim(NAMESPACE, name).reclaim_policy("Delete").build()), end="")
        claim = PVCBuilder(name, NAMESPACE).size("1Gi").storage_class("").volume(volume)
        if name == "precious":
            claim = claim.labels({"trainwarden.dev/protect": "true"})
        print(apply(claim.build(), namespace=NAMESPACE), end="")
    pod = simulated(PodBuilder("notebook", NAMESPACE).claim("in-use"), gpus=0).build()
    print(apply(pod, namespace=NAMESPACE), end="")


def _planned() -> set[str] | None:
    claims: list[dict[str, Any]] = (get("vrp", NAME).get("status") or {}).get("claims", [])
    return {c["name"] for c in claims if c.get("planned")} or None


def _show_states() -> None:
    """The policy's own last-mount record (status.claims) and why the protected claim is
    left alone (its Event)."""
    for c in get("vrp", NAME)["status"].get("claims", []):
        plan = f", planned: {c['planned']}" if c.get("planned") else ""
        print(f"  {c['name']}: {c['state']} since {c['unmountedSince']}{plan}")
    print("  in-use: not listed (a pod mounts it)")
    print(kubectl(
        "get", "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=precious",
        "-o", "custom-columns=REASON:.reason,MESSAGE:.message",
    ), end="")  # fmt: skip


def _gone() -> bool:
    found = get("pvc", "-n", NAMESPACE)["items"]
    live = {c["metadata"]["name"] for c in found if "deletionTimestamp" not in c["metadata"]}
    return "scratch" not in live


def _clean() -> None:
    """The policy first (so it deletes nothing meanwhile), then the namespace and volumes."""
    kubectl("delete", "vrp", NAME, "--ignore-not-found", "--wait=false")
    kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")
    wait_for(
        lambda: not kubectl("get", "namespace", NAMESPACE, "--ignore-not-found").strip(),
        timeout=90,
        what=f"namespace {NAMESPACE} gone",
    )
    volumes = [f"pv/{NAMESPACE}-{name}" for name in CLAIMS]
    kubectl("delete", *volumes, "--ignore-not-found", "--wait=false")
