#!/usr/bin/env bash
# Stop the real node and leave nothing of it on the host: its pods (through kubelet while
# the API server is up, by force otherwise), kubelet, containerd and its shims, their
# mounts, the pods' cgroups, the CNI bridge, and .cluster/state/node. Keeps the image
# cache (.cluster/images). Safe to run when nothing is up; down.sh runs it first.
# Usage: e2e/cluster/node/node-down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"

t_all=$(now_ms)
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" --request-timeout=5s "$@"; }
api_up() { [[ -f $KUBECONFIG_PATH ]] && kubectl get --raw /readyz >/dev/null 2>&1; }
have_ctr() { [[ -S $CONTAINERD_SOCK ]] && running containerd && ctr_ version >/dev/null 2>&1; }

# stop_pid NAME PID: TERM, then KILL after 10 s.
stop_pid() {
  local name=$1 pid=$2 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for (( i = 0; i < 50; i++ )); do alive "$pid" || return 0; sleep 0.2; done
  warn "KILL $name pid $pid: still running 10s after TERM"
  kill -KILL "$pid" 2>/dev/null || true
}

# node_pids: live processes of this node found by path (containerd, kubelet, shims),
# whether or not a pid file still names them.
node_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
    case $cmd in
      "$BIN_DIR/kubelet "*|"/usr/bin/containerd --config $CONTAINERD_DIR/"*|\
      *containerd-shim*" -address $CONTAINERD_SOCK "*) printf '%s\n' "$p" ;;
    esac
  done
}

# 1. Pods, the way a drain does it: delete them and let kubelet stop them (it tears down
#    their network and volumes). Force: the cluster is going away; kubelet still kills
#    each container with SIGTERM first.
if running kubelet && api_up && kubectl get node "$NODE_NAME" >/dev/null 2>&1; then
  n=$(kubectl get pods -A --field-selector "spec.nodeName=$NODE_NAME" -o name 2>/dev/null | wc -l)
  if (( n )); then
    t=$(now_ms)
    kubectl get pods -A --field-selector "spec.nodeName=$NODE_NAME" \
      -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name}{"\n"}{end}' |
      while read -r ns name; do
        kubectl delete pod -n "$ns" "$name" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
      done
    # Wait (bounded) until kubelet has stopped every sandbox it ran.
    for (( i = 0; i < 60; i++ )); do
      have_ctr || break
      [[ -z $(ctr_ tasks ls -q 2>/dev/null) ]] && break
      sleep 0.5
    done
    log "node $NODE_NAME: $n pods deleted in $(fmt_ms "$t")"
  fi
  kubectl delete node "$NODE_NAME" --wait=false >/dev/null 2>&1 || true
fi

# 2. kubelet.
if pid=$(pid_of kubelet); then
  stop_pid kubelet "$pid"
  log "stopped kubelet($pid)"
fi

# 3. Whatever containers are left: kill their tasks, free their network namespaces.
if have_ctr; then
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill --all --signal SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    netns=$(ctr_ containers info "$id" 2>/dev/null |
      python3 -c 'import json, sys
spec = json.load(sys.stdin).get("Spec") or {}
print(next((n.get("path", "") for n in spec.get("linux", {}).get("namespaces", []) if n.get("type") == "network"), ""))' 2>/dev/null || true)
    ctr_ tasks delete --force "$id" >/dev/null 2>&1 || true
    ctr_ containers delete "$id" >/dev/null 2>&1 || true
    if [[ $netns == /var/run/netns/cni-* || $netns == /run/netns/cni-* ]]; then
      umount "$netns" 2>/dev/null || true
      rm -f "$netns"
    fi
  done
fi

# 4. containerd, then any shim or daemon of this node still alive.
if pid=$(pid_of containerd); then
  stop_pid containerd "$pid"
  log "stopped containerd($pid)"
fi
for pid in $(node_pids); do
  log "stray node process $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)"
  stop_pid stray "$pid"
done

# 5. Mounts under the node's state (pod volumes, container root filesystems), deepest first.
if [[ -d $NODE_STATE ]]; then
  awk -v p="$NODE_STATE/" 'index($5, p) == 1 {print $5}' /proc/self/mountinfo | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"; done
fi

# 6. The pods' cgroups (empty now) and the CNI bridge.
for root in /sys/fs/cgroup/*"$KUBELET_CGROUP_ROOT"; do
  [[ -d $root ]] && find "$root" -depth -type d -exec rmdir {} + 2>/dev/null || true
done
ip link delete "$CNI_BRIDGE" 2>/dev/null || true

rm -rf "$NODE_STATE"
[[ -z $(node_pids) ]] || die "node processes still running: $(node_pids | tr '\n' ' ')"
log "real node down in $(fmt_ms "$t_all")"
