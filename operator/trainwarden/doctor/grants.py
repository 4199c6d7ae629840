"""The grants a release's roles give the operator's ServiceAccount, from its manifests
(plain data): what the doctor's rbac check asks the API server about, one by one."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One verb on one resource, as a Role or ClusterRole rule grants it."""

    namespace: str
    """"" for a ClusterRole's grant (cluster-wide)."""
    group: str
    resource: str
    verb: str
    name: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        group = f"{self.group}/" if self.group else ""
        return f"{self.verb} {group}{self.resource}{named}{where}"


def grants(manifests: Iterable[Mapping[str, Any]], account: tuple[str, str]) -> list[Grant]:
    """Every grant of the (Cluster)Roles the manifests bind to the ServiceAccount."""
    docs = [d for d in manifests if isinstance(d, Mapping)]
    bound: set[tuple[str, str, str]] = set()
    for d in docs:
        if d.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        subjects = d.get("subjects") or []
        if any(_is_account(s, account) for s in subjects):
            ref = d.get("roleRef") or {}
            scope = (
                (d.get("metadata") or {}).get("namespace", "") if ref.get("kind") == "Role" else ""
            )
            bound.add((str(ref.get("kind")), str(ref.get("name")), str(scope)))
    out = set()
    for d in docs:
        meta = d.get("metadata") or {}
        kind, name = d.get("kind"), meta.get("name")
        scope = str(meta.get("namespace", "")) if kind == "Role" else ""
        if (kind, name, scope) in bound:
            out.update(_rule_grants(d.get("rules") or [], scope))
    return sorted(out)


def _is_account(subject: Mapping[str, Any], account: tuple[str, str]) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and (
            subject.get("namespace"),
            subject.get("name"),
        )
        == account
    )


def _rule_grants(rules: Iterable[Mapping[str, Any]], namespace: str) -> set[Grant]:
    return {
        Grant(namespace, group, resource, verb, name)
        for rule in rules
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
        for name in (rule.get("resourceNames") or [""])
    }
