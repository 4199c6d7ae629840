"""The base of every builder: an object's identity, metadata and any field by path.

Builders in the style of Kueue's (`MakeWorkload(name, ns).Queue(q).Obj()`): each method
sets one thing and returns the builder, `build()` returns a fresh dict, so a test says
only what matters to it and one shape serves the unit tests, the e2e tests and the demo.
"""

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Self, overload

from trainwarden.api.v1alpha1.names import BUDGET_LABEL, EXEMPT
from trainwarden.api.v1alpha1.types import format_duration
from trainwarden.testing.apiserver import rfc3339

JSON = dict[str, Any]


class ObjectBuilder:
    """Any Kubernetes object: `ObjectBuilder("v1", "ConfigMap", "c", "ns").field(...)`.

    A namespaced object built without a namespace gets it where it is created
    (`create_namespaced_*`, `kubectl apply -n`), as a manifest in a repository does.
    """

    def __init__(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> None:
        metadata: JSON = {"name": name}
        if namespace is not None:
            metadata["namespace"] = namespace
        self._obj: JSON = {"apiVersion": api_version, "kind": kind, "metadata": metadata}

    def labels(self, labels: Mapping[str, str] | None = None, /, **more: str) -> Self:
        self._meta().setdefault("labels", {}).update({**(labels or {}), **more})
        return self

    def annotations(self, annotations: Mapping[str, str] | None = None, /, **more: str) -> Self:
        self._meta().setdefault("annotations", {}).update({**(annotations or {}), **more})
        return self

    def budget(self, name: str) -> Self:
        """Charged to the budget `name` (honoured only inside that budget's scope)."""
        return self.labels({BUDGET_LABEL: name})

    def exempt(self) -> Self:
        """Asks idle policies that allow it to leave this workload alone."""
        return self.annotations({EXEMPT: "true"})

    def owned_by(self, owner: Mapping[str, Any], *, controller: bool = True) -> Self:
        """An ownerReference to `owner`, which must have a uid (create or put it first)."""
        meta = owner["metadata"]
        if not meta.get("uid"):
            raise ValueError(f"{owner['kind']} {meta['name']} has no uid: create it first")
        reference = {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": controller,
            "blockOwnerDeletion": True,
        }
        self._meta().setdefault("ownerReferences", []).append(reference)
        return self

    def uid(self, uid: str) -> Self:
        self._meta()["uid"] = uid
        return self

    def created(self, at: datetime) -> Self:
        self._meta()["creationTimestamp"] = rfc3339(at)
        return self

    def deleting(self, at: datetime) -> Self:
        """Being deleted since `at` (held by a finalizer, or a pod terminating)."""
        self._meta()["deletionTimestamp"] = rfc3339(at)
        return self

    def finalizers(self, *names: str) -> Self:
        self._meta().setdefault("finalizers", []).extend(names)
        return self

    def field(self, path: str, value: Any) -> Self:
        """Set any field by its dotted path ("spec.template.spec.schedulerName"); None
        removes it. For what no method covers, and for deliberately invalid objects."""
        set_path(self._obj, path, value)
        return self

    def build(self) -> JSON:
        return copy.deepcopy(self._obj)

    def _meta(self) -> JSON:
        meta: JSON = self._obj["metadata"]
        return meta


def set_path(obj: JSON, path: str, value: Any) -> None:
    """Set `value` at a dotted path, creating objects on the way; None removes the field."""
    *parents, leaf = path.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value


@overload
def duration(value: str | timedelta) -> str: ...
@overload
def duration(value: None) -> None: ...
def duration(value: str | timedelta | None) -> str | None:
    """A duration as the API spells it: "30m" stays, a timedelta is formatted."""
    if value is None or isinstance(value, str):
        return value
    return format_duration(value)
