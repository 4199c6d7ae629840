#!/usr/bin/env bash
# Stop every process of the local control plane and delete its state (.cluster/state,
# .cluster/kubeconfig, .cluster/cluster.env). Keeps the caches: .cluster/bin,
# .cluster/prometheus, .cluster/images, .cluster/containerd. Safe to run when nothing is up.
# Usage: e2e/cluster/down.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$CLUSTER_DIR"
take_lock 9 "$CLUSTER_DIR/.up.lock"   # serialise concurrent up.sh / down.sh runs

t=$(now_ms)
# The real node first, while the API server can still tell its kubelet to stop the pods.
"$CLUSTER_SRC/node/node-down.sh"

# Stop in tiers, reverse start order: clients (the operator `make demo` started among
# them), then the apiserver, then etcd (the
# apiserver shuts down cleanly only while etcd is still there).
TIERS=("operator prometheus-operator kueue dcgm-exporter s3 registry prometheus kwok kube-scheduler kube-controller-manager" kube-apiserver etcd)

TIERS[0]+=" kube-state-metrics alertmanager"   # a client too; Prometheus's receiver

# stop_pids LABEL PID...: TERM, wait up to 10 s, then KILL what is left.
stop_pids() {
  local label=$1 pid deadline any; shift
  (( $# )) || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$(( $(now_ms) + 10000 ))
  while (( $(now_ms) < deadline )); do
    any=0
    for pid in "$@"; do alive "$pid" && any=1 && break; done
    (( any )) || return 0
    sleep 0.2
  done
  for pid in "$@"; do
    if alive "$pid"; then
      warn "KILL $label pid $pid: still running 10s after TERM"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

for tier in "${TIERS[@]}"; do
  pids=() names=()
  for name in $tier; do
    if pid=$(pid_of "$name"); then pids+=("$pid"); names+=("$name($pid)"); fi
  done
  if (( ${#pids[@]} )); then
    t_tier=$(now_ms)
    stop_pids "${names[*]}" "${pids[@]}"
    log "stopped ${names[*]} in $(fmt_ms "$t_tier")"
  fi
done
# Strays: harness daemons without a (valid) pid file, e.g. after a lost state directory.
mapfile -t strays < <(harness_pids)
if (( ${#strays[@]} )); then
  for pid in "${strays[@]}"; do
    log "stray harness process $pid: $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | cut -c1-120)"
  done
  stop_pids strays "${strays[@]}"
fi
left=$(harness_pids)
[[ -z $left ]] || die "harness processes still running: $left"

rm -rf "$STATE_DIR" "$KUBECONFIG_PATH" "$ENV_FILE"
log "cluster down, state removed (kept $BIN_DIR, $PROM_DIR and the image caches) in $(fmt_ms "$t")"
