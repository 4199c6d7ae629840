"""The generated half of the confinement test: each write of the corpus, varied one field
at a time (confinement_mutations.py), sent by an admin and by the operator, and tallied.

A variation the admin's request does not get through (invalid) or that the API server
ignores (the same object results) tests nothing and is only counted. Every other one must
be refused for the operator by a confinement policy, unless it touches what the policy
lets vary (`free`: trainwarden's own marks, the one field a write flips, our check's
state, what a pruner Job varies by design).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confinement_corpus import Done, World
from confinement_mutations import REMOVE, Edit, Schemas, cleaned, edited, edits
from confinement_writes import JSON, Answer, Client, object_path, resource
from trainwarden.core.patches import merge_patch_diff


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    """The release's own (a protected namespace)."""
    team: str
    """Where the workloads are."""
    operator: Client
    admin: Client
    world: World
    kubeconfig: Path

    def refused(self, answer: Answer) -> bool:
        return (
            answer.status == 403
            and f"ValidatingAdmissionPolicy '{self.name}-trainwarden-confinement" in answer.message
        )


OWN = "trainwarden.dev/"
SUSPEND = {
    "jobs": ("spec", "suspend"),
    "jobsets": ("spec", "suspend"),
    "rayjobs": ("spec", "suspend"),
    "pytorchjobs": ("spec", "runPolicy", "suspend"),
    "workloads": ("spec", "active"),
    "nodes": ("spec", "unschedulable"),
}
"""The one field of each kind's spec the operator flips (adapters/workloads.py, idle_nodes)."""


def _free(done: Done, after: JSON) -> Callable[[Edit], bool]:
    """The edits the policy lets through: trainwarden's own marks, the field the write
    flips, the check state it decides, and what a pruner Job varies by design."""
    sent = done.sent
    assert sent is not None
    path = sent.path.split("?")[0]
    kind = resource(sent)

    def free(edit: Edit) -> bool:
        p = edit.path
        if p[:1] == ("metadata",) and len(p) >= 3 and p[1] in ("labels", "annotations"):
            return str(p[2]).startswith(OWN)
        if p[:1] == ("metadata",) and len(p) == 2 and p[1] in ("labels", "annotations"):
            return edit.value is REMOVE and all(k.startswith(OWN) for k in after["metadata"][p[1]])
        if path.endswith("/eviction"):  # the nested DeleteOptions' own type, ignored
            return p in (("deleteOptions", "kind"), ("deleteOptions", "apiVersion"))
        if sent.method == "POST":
            return _pruner_free(edit, after)
        if path.endswith("/status"):
            return _status_free(edit, after, kind)
        if kind == "mutatingwebhookconfigurations":
            return p[:1] == ("webhooks",) and p[2:] == ("clientConfig", "caBundle")
        flips = SUSPEND.get(kind)
        if flips == ("spec", "runPolicy", "suspend") and p == flips[:2] and edit.value is REMOVE:
            return set(after["spec"]["runPolicy"]) == {"suspend"}
        return p == flips

    return free


def _status_free(edit: Edit, after: JSON, resource: str) -> bool:
    p = edit.path
    if resource == "workloads":
        entries = after["status"]["admissionChecks"]
        ours = next(i for i, e in enumerate(entries) if e["name"].startswith("budget-"))
        if p[:3] != ("status", "admissionChecks", ours) or len(p) != 4:
            return False
        if p[3] == "state":
            return edit.value in ("Pending", "Ready", "Rejected")
        return p[3] in ("message", "lastTransitionTime")
    conditions = after["status"]["conditions"]
    active = next(i for i, c in enumerate(conditions) if c["type"] == "Active")
    return p[:3] == ("status", "conditions", active) and len(p) == 4 and p[3] in (
        "message", "lastTransitionTime", "observedGeneration",
    )  # fmt: skip


def _pruner_free(edit: Edit, after: JSON) -> bool:
    """A pruner's policy label and reason text, its directory, policy, pins and claim."""
    p, value = edit.path, edit.value
    if p == ("metadata", "labels", "trainwarden.dev/policy"):
        return value is not REMOVE
    if p == ("metadata", "annotations", "trainwarden.dev/reason"):
        return isinstance(value, str) and value.startswith("CheckpointPolicy ")
    pod = ("spec", "template", "spec")
    if p == (*pod, "volumes", 0, "persistentVolumeClaim", "claimName"):
        return isinstance(value, str) and value != ""
    args = after["spec"]["template"]["spec"]["containers"][0]["args"]
    where = (*pod, "containers", 0, "args")
    if args[10:11] in (["--finished"], ["--running"]):  # a state the operator renders, or none
        without = args[:10] + args[11:]
        if (p == where and value == without) or (p == (*where, 10) and value is REMOVE):
            return True
    if p[:-1] != where or not isinstance(value, str):
        return False
    i = int(p[-1])
    tail = 11 if len(args) > 10 and args[10] in ("--finished", "--running") else 10
    return (
        (i == 1 and value.startswith("/checkpoints/") and "/." not in value)
        or (i == 3 and value.startswith("{"))
        or (i >= tail and (i - tail) % 2 == 1 and not value.startswith("-"))
    )


@dataclass
class Tally:
    """What became of the generated writes."""

    generated: int = 0
    invalid: int = 0
    """Refused to an admin too (the API server's own validation): no test of the policy."""
    unchanged: int = 0
    """The API server ignores the change (a status in a spec write, an unknown field)."""
    refused: int = 0
    allowed: list[str] = field(default_factory=list)
    """Let through for the operator: a hole (or a field the policy names, missing in _free)."""
    other: list[str] = field(default_factory=list)
    """Refused for the operator, but not by the policy."""


class Mutations:
    def __init__(self, release: Release) -> None:
        self.release = release
        self.documents: dict[str, Schemas] = {}
        self.tally = Tally()

    def schema(self, obj: JSON, path: str) -> tuple[Schemas, JSON]:
        """The OpenAPI schema of `obj`'s kind, from the API server."""
        if path.endswith("/eviction"):
            obj = {"apiVersion": "policy/v1", "kind": "Eviction"}
        group_version = "/".join(path.split("/")[1 : 4 if path.startswith("/apis/") else 3])
        group, _, version = str(obj["apiVersion"]).rpartition("/")
        if group_version not in self.documents:
            document = self.release.admin.get(f"/openapi/v3/{group_version}")
            self.documents[group_version] = Schemas(document["components"]["schemas"])
        schemas = self.documents[group_version]
        return schemas, schemas.of_kind(group, version, obj["kind"])

    def run(self, done: Done) -> None:
        sent = done.sent
        assert sent is not None
        path = sent.path.split("?")[0]
        replayed = self.release.operator.replay(sent)
        assert replayed.ok, f"{done.what}: {replayed.message}"
        live: JSON = {}
        roots: tuple[str, ...]
        if path.endswith("/eviction"):
            base, roots = sent.body, ("deleteOptions",)
        elif sent.method == "POST":
            base, roots = _creatable(replayed.body), ("metadata", "spec")
        else:
            base, live = replayed.body, self.release.admin.get(object_path(sent))
            body = "status" if path.endswith("/status") else "spec"
            roots = ("metadata", "webhooks" if "webhooks" in base else body)
        # The control: the write the edits are made on, as they are sent, is allowed.
        control = self.release.operator.write(sent.method, path, _body(sent.method, live, base))
        assert control.ok, f"{done.what}, as edits are sent: {control.message}"
        schemas, schema = self.schema(base, path)
        for edit in edits(base, schema, schemas, roots, _free(done, base)):
            self.one(done, path, live, base, edit)

    def one(self, done: Done, path: str, live: JSON, base: JSON, edit: Edit) -> None:
        assert done.sent is not None
        self.tally.generated += 1
        body = _body(done.sent.method, live, edited(base, edit))
        admin = self.release.admin.write(done.sent.method, path, body)
        if not admin.ok:
            self.tally.invalid += 1
            return
        if admin.body.get("kind") != "Status" and _same(admin.body, base):
            self.tally.unchanged += 1
            return
        operator = self.release.operator.write(done.sent.method, path, body)
        where = f"{done.what}: {edit}"
        if self.release.refused(operator):
            self.tally.refused += 1
        elif operator.ok:
            self.tally.allowed.append(where)
        else:
            self.tally.other.append(f"{where}: {operator.status} {operator.message[:200]}")


def _body(method: str, live: JSON, wanted: JSON) -> Any:
    """What makes `wanted` of `live`: itself (a creation, an eviction) or a merge patch."""
    return wanted if method == "POST" else merge_patch_diff(cleaned(live), cleaned(wanted))


def _creatable(created: JSON) -> JSON:
    """A created Job as it could be sent again: without what the API server generates."""
    job = cleaned(created)
    job["spec"].pop("selector", None)
    labels = job["spec"]["template"]["metadata"]["labels"]
    for key in (
        "batch.kubernetes.io/controller-uid",
        "controller-uid",
        "batch.kubernetes.io/job-name",
        "job-name",
    ):
        labels.pop(key, None)
    return job


def _same(answer: JSON, base: JSON) -> bool:
    """Whether the API server made of the write what it makes of the operator's own."""
    got = cleaned(answer)
    if "selector" in got.get("spec", {}) and "selector" not in base.get("spec", {}):
        got = _creatable(got)
    return got == cleaned(base)


def entry(r: Release, i: int, **change: str) -> JSON:
    """Entry `i` of the Workload's status.admissionChecks, changed."""
    wl = r.admin.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{r.team}/workloads/wl")
    entry: JSON = wl["status"]["admissionChecks"][i]
    return {**entry, **change}
