#!/usr/bin/env bash
# Stop every process of the local control plane and delete its state (.cluster/state,
# .cluster/kubeconfig, .cluster/cluster.env). Keeps the caches: .cluster/bin and
# .cluster/prometheus. Safe to run when nothing is up. Usage: e2e/cluster/down.sh
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$CLUSTER_DIR"
exec 9>"$CLUSTER_DIR/.up.lock"
flock 9

t=$(now_ms)
# Reverse start order: clients before the apiserver, the apiserver before etcd.
ORDER=(dcgm-exporter prometheus kwok kube-scheduler kube-controller-manager kube-apiserver etcd)

declare -A victims=()
for name in "${ORDER[@]}"; do
  if pid=$(pid_of "$name"); then
    victims[$pid]=$name
    kill -TERM "$pid" 2>/dev/null || true
    log "TERM $name (pid $pid)"
  fi
done
# Strays: harness daemons without (valid) pid files, e.g. after a lost state directory.
for pid in $(harness_pids); do
  if [[ -z ${victims[$pid]:-} ]]; then
    victims[$pid]="stray: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-100)"
    kill -TERM "$pid" 2>/dev/null || true
    log "TERM ${victims[$pid]} (pid $pid)"
  fi
done

# Give them up to 10 s to exit, then KILL what is left.
deadline=$(( $(now_ms) + 10000 ))
while (( $(now_ms) < deadline )); do
  any=0
  for pid in "${!victims[@]}"; do alive "$pid" && any=1 && break; done
  (( any )) || break
  sleep 0.2
done
for pid in "${!victims[@]}"; do
  if alive "$pid"; then
    warn "KILL ${victims[$pid]} (pid $pid) did not exit after TERM"
    kill -KILL "$pid" 2>/dev/null || true
  fi
done
left=$(harness_pids)
[[ -z $left ]] || die "harness processes still running: $left"

rm -rf "$STATE_DIR" "$KUBECONFIG_PATH" "$ENV_FILE"
log "cluster down, state removed (kept $BIN_DIR and $PROM_DIR) in $(fmt_ms "$t")"
