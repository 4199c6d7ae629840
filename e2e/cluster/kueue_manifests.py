"""Kueue's CRDs, RBAC and webhook configurations from its Go module, for a local process.

Upstream installs them with kustomize (config/default), every webhook pointing at a
Service in kueue-system. Here Kueue is a process on 127.0.0.1, so this script reads the
same files from the pinned module and rewrites them:

- every admission and CRD conversion webhook: `url: https://127.0.0.1:<port><path>` and
  `caBundle` = the cluster CA (instead of `service:`); names get kustomize's `kueue-`
  prefix, as upstream;
- the CRDs: the conversion webhooks config/components/crd/kustomization.yaml enables
  (v1beta1 <-> v1beta2; v1beta2 is the storage version);
- webhooks: Kueue's own API group as upstream (cluster-wide), plus the integrations the
  harness enables (batch/v1 Job only), those restricted to namespaces labelled
  `<label>: "true"` (and never kube-system/kueue-system). Webhooks for integrations that
  are off (pods, deployments, JobSet, Kubeflow, Ray, ...) are left out: their paths are
  no-ops in Kueue and their resources are not served here;
- RBAC: Kueue's generated ClusterRole (config/components/rbac/role.yaml) and its metrics
  auth role, bound to the user of Kueue's client certificate.

Writes crds.json, rbac.json and webhooks.json (each a List) into --out.
Usage: kueue_manifests.py --module DIR --ca FILE --webhook-port N --namespace-label KEY
       --user NAME --out DIR
"""

import argparse
import base64
import json
from pathlib import Path
from typing import Any

import yaml

try:
    LOADER: Any = yaml.CSafeLoader  # the Workload CRD is 1.4 MB of YAML: 0.3 s vs ~10 s
except AttributeError:  # PyYAML without libyaml
    LOADER = yaml.SafeLoader

PREFIX = "kueue-"  # config/default/kustomization.yaml: namePrefix
LABELS = {"app.kubernetes.io/name": "kueue", "app.kubernetes.io/part-of": "trainwarden-e2e"}
INTEGRATIONS = {("batch", "jobs")}  # (API group, resource) of the enabled frameworks
NEVER_MANAGED = ["kube-system", "kueue-system"]  # upstream's exclusion, kept

Manifest = dict[str, Any]


def load_all(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.load_all(path.read_text(), Loader=LOADER) if doc]


def labelled(obj: Manifest) -> Manifest:
    obj["metadata"].setdefault("labels", {}).update(LABELS)
    return obj


def client_config(url_base: str, ca_bundle: str, path: str) -> Manifest:
    return {"url": f"{url_base}{path}", "caBundle": ca_bundle}


def crds(module: Path, url_base: str, ca_bundle: str) -> list[Manifest]:
    """Every CRD of config/components/crd, with the conversion webhooks it enables."""
    base = module / "config/components/crd"
    kustomization = yaml.load((base / "kustomization.yaml").read_text(), Loader=LOADER)
    conversions: dict[str, Manifest] = {}
    for patch in kustomization.get("patches", []):
        doc = yaml.load((base / patch["path"]).read_text(), Loader=LOADER)
        conversion = doc["spec"]["conversion"]
        service = conversion["webhook"]["clientConfig"]["service"]
        conversion["webhook"]["clientConfig"] = client_config(url_base, ca_bundle, service["path"])
        conversions[doc["metadata"]["name"]] = conversion
    result = []
    for resource in kustomization["resources"]:
        crd = yaml.load((base / resource).read_text(), Loader=LOADER)
        name = crd["metadata"]["name"]
        if name in conversions:
            crd["spec"]["conversion"] = conversions.pop(name)
        result.append(labelled(crd))
    if conversions:
        raise SystemExit(f"conversion patches for CRDs that are not installed: {conversions}")
    return result


def managed(webhook: Manifest) -> bool:
    """True for a webhook on Kueue's own API, or on an enabled integration's resource."""
    pairs = {
        (group, resource)
        for rule in webhook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    return {group for group, _ in pairs} == {"kueue.x-k8s.io"} or pairs <= INTEGRATIONS


def webhooks(module: Path, url_base: str, ca_bundle: str, label: str) -> list[Manifest]:
    result = []
    for config in load_all(module / "config/components/webhook/manifests.yaml"):
        config["metadata"]["name"] = PREFIX + config["metadata"]["name"]
        kept = []
        for webhook in config["webhooks"]:
            if not managed(webhook):
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = client_config(url_base, ca_bundle, path)
            if webhook["rules"][0]["apiGroups"] != ["kueue.x-k8s.io"]:
                webhook["namespaceSelector"] = {
                    "matchLabels": {label: "true"},
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": NEVER_MANAGED,
                        }
                    ],
                }
            kept.append(webhook)
        config["webhooks"] = kept
        result.append(labelled(config))
    return result


def rbac(module: Path, user: str) -> list[Manifest]:
    """Kueue's manager and metrics-auth ClusterRoles, bound to Kueue's client cert user."""
    result = []
    for file in ("role.yaml", "metrics_auth_role.yaml"):
        for role in load_all(module / "config/components/rbac" / file):
            role["metadata"]["name"] = PREFIX + role["metadata"]["name"]
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role["metadata"]["name"]},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role["metadata"]["name"],
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            }
            result += [labelled(role), labelled(binding)]
    return result


def write(out: Path, name: str, items: list[Manifest]) -> None:
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n"
    tmp = out / f"{name}.tmp"
    tmp.write_text(text)
    tmp.replace(out / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--module", type=Path, required=True, help="sigs.k8s.io/kueue@<version>")
    parser.add_argument("--ca", type=Path, required=True, help="CA that signed Kueue's cert")
    parser.add_argument("--webhook-port", type=int, required=True)
    parser.add_argument("--namespace-label", required=True)
    parser.add_argument("--user", required=True, help="Kueue's client certificate CN")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    url_base = f"https://127.0.0.1:{args.webhook_port}"
    ca_bundle = base64.b64encode(args.ca.read_bytes()).decode()
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out, "crds.json", crds(args.module, url_base, ca_bundle))
    write(args.out, "rbac.json", rbac(args.module, args.user))
    write(
        args.out,
        "webhooks.json",
        webhooks(args.module, url_base, ca_bundle, args.namespace_label),
    )


if __name__ == "__main__":
    main()
