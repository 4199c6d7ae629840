#!/usr/bin/env bash
# Install the VolumeSnapshot CRDs (snapshot.storage.k8s.io/v1) from the external-snapshotter
# project's own manifests, which its client module carries (config/crd), fetched from the Go
# module proxy. No snapshot controller or CSI driver: tests that need a ready snapshot play
# the controller's part by writing its status. Idempotent (server-side apply).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SNAPSHOTTER_VERSION="v8.7.0"
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

module="github.com/kubernetes-csi/external-snapshotter/client/v8@$SNAPSHOTTER_VERSION"
dir=$(cd "$CLUSTER_DIR" && GOFLAGS=-mod=mod go mod download -json "$module" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
for kind in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
  kubectl apply --server-side --force-conflicts -f "$dir/config/crd/snapshot.storage.k8s.io_$kind.yaml" >/dev/null
done
kubectl wait --for=condition=Established --timeout=60s \
  crd/volumesnapshotclasses.snapshot.storage.k8s.io \
  crd/volumesnapshotcontents.snapshot.storage.k8s.io \
  crd/volumesnapshots.snapshot.storage.k8s.io >/dev/null
log "VolumeSnapshot CRDs of external-snapshotter $SNAPSHOTTER_VERSION installed"
