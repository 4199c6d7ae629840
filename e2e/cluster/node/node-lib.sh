# shellcheck shell=bash
# Settings shared by the real node's scripts (node-up.sh, node-down.sh, image.sh).
# Source it; do not run it. It sources ../lib.sh (layout, ports, helpers).
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NODE_SRC="$CLUSTER_SRC/node"                       # e2e/cluster/node
NODE_NAME="${TRAINWARDEN_REAL_NODE_NAME:-real-0}"
IMAGES_DIR="$CLUSTER_DIR/images"                   # cached OCI archives (kept by down.sh)
IMAGES_ENV="$IMAGES_DIR/images.env"                # PAUSE_IMAGE=..., TRAINWARDEN_IMAGE=...
NODE_STATE="$STATE_DIR/node"                       # removed by down.sh (after node-down.sh)
CONTAINERD_DIR="$NODE_STATE/containerd"             # state, socket, config, runc state
CONTAINERD_ROOT="$CLUSTER_DIR/containerd"           # images + snapshots: a cache, kept by down.sh
CONTAINERD_SOCK="$CONTAINERD_DIR/containerd.sock"
KUBELET_DIR="$NODE_STATE/kubelet"                  # kubelet --root-dir (pod volumes live here)
CNI_CONF_DIR="$NODE_STATE/cni/net.d"
CNI_DATA_DIR="$NODE_STATE/cni/data"
NODE_PV_DIR="$NODE_STATE/volumes"                  # hostPath PersistentVolumes of the real node
# kubelet's podLogsDir: not the default /var/log/pods, which another cluster's kubelet on this
# host would garbage-collect (it removes every pod log directory of pods it does not know).
NODE_POD_LOGS_DIR="$NODE_STATE/pod-logs"
# containerd's registry hosts directory (config_path): <host:port>/hosts.toml per registry.
CONTAINERD_CERTS_DIR="$CONTAINERD_DIR/certs.d"
export NODE_SRC NODE_NAME IMAGES_DIR NODE_STATE CONTAINERD_DIR CONTAINERD_ROOT CONTAINERD_SOCK KUBELET_DIR

# Ports follow TRAINWARDEN_CLUSTER_PORT_OFFSET like the control plane's, so a second
# cluster (a copy of the repository) can run its own kubelet beside this one.
KUBELET_PORT=$(( 10250 + _port_offset ))
KUBELET_HEALTHZ_PORT=$(( 10248 + _port_offset ))
# Pods of this kubelet go under their own cgroup root, and the CNI bridge has its own
# name and subnet per offset: two clusters on one host do not share either.
_node_index=$(( _port_offset / 100 ))
KUBELET_CGROUP_ROOT="/trainwarden-$_node_index"
CNI_BRIDGE="twcni$_node_index"
CNI_SUBNET="10.88.$_node_index.0/24"

# Debian packages the node needs on the host (installed by node-up.sh when missing).
NODE_PACKAGES=(containerd runc containernetworking-plugins gcc libc6-dev)   # gcc: pause.c, static

ctr_() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# import_images: load the archives named in images.env into containerd unless it has them.
import_images() {
  local present ref tar t
  [[ -S $CONTAINERD_SOCK ]] || die "containerd is not running (no $CONTAINERD_SOCK)"
  # shellcheck disable=SC1090
  source "$IMAGES_ENV"
  present=$(ctr_ images ls -q)
  # Earlier builds' images: containerd's garbage collector frees their layers.
  while read -r ref; do
    [[ -n $ref ]] || continue
    ctr_ images rm "$ref" >/dev/null && log "removed old image $ref from containerd"
  done < <(grep -E '^localhost/trainwarden[:/]' <<<"$present" |
           grep -vxF -e "$PAUSE_IMAGE" -e "$TRAINWARDEN_IMAGE" -e "$PROMETHEUS_IMAGE" -e "$RELOADER_IMAGE" || true)
  for ref in "$PAUSE_IMAGE=$PAUSE_ARCHIVE" "$TRAINWARDEN_IMAGE=$TRAINWARDEN_ARCHIVE" \
             "$PROMETHEUS_IMAGE=$PROMETHEUS_ARCHIVE" "$RELOADER_IMAGE=$RELOADER_ARCHIVE"; do
    tar=${ref#*=} ref=${ref%%=*}
    if grep -qxF "$ref" <<<"$present"; then
      log "containerd has $ref"
    else
      t=$(now_ms)
      ctr_ images import "$tar" >/dev/null
      log "imported $ref into containerd in $(fmt_ms "$t")"
    fi
  done
}
