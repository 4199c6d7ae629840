#!/usr/bin/env bash
# Start (or repair) the real node: containerd (Debian's package) + runc, and a kubelet
# built from the same k8s.io/kubernetes module as the control plane, registered as node
# $NODE_NAME (default real-0) beside the kwok nodes. Needs root and a running control plane
# (e2e/cluster/up.sh calls this script last). Idempotent: when containerd and kubelet are
# up and the node is Ready with its GPUs, it returns at once.
#
#   - installs containerd, runc, containernetworking-plugins with apt-get when missing
#   - builds the pause and trainwarden images (image.sh) and imports them into containerd
#   - issues the node's client cert (system:node:<name>, group system:nodes) and serving
#     cert from the cluster CA, and binds the API server's kubelet client to kubelet-api-admin
#   - labels trainwarden.dev/real-node=true, taints trainwarden.dev/real-node=true:NoSchedule
#   - advertises nvidia.com/gpu (TRAINWARDEN_REAL_NODE_GPUS, default 4) by a JSON patch on
#     the node's status, the documented way to advertise an extended resource
#
# Usage: e2e/cluster/node/node-up.sh      (stop: node-down.sh; why each setting: README.md)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"

GPUS=${TRAINWARDEN_REAL_NODE_GPUS:-4}
KC="$NODE_STATE/kubelet.kubeconfig"
API_URL="https://127.0.0.1:$APISERVER_PORT"
kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }
t_all=$(now_ms)

(( EUID == 0 )) || die "the real node needs root (containerd, runc, kubelet's cgroups and mounts)"
[[ -f $KUBECONFIG_PATH ]] || die "no $KUBECONFIG_PATH: start the control plane first (e2e/cluster/up.sh)"
[[ -x $BIN_DIR/kubelet ]] || die "no $BIN_DIR/kubelet: run e2e/cluster/build.sh"

node_ready() {
  [[ $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}
node_gpus() {  # "capacity allocatable" of nvidia.com/gpu
  kubectl get node "$NODE_NAME" -o jsonpath='{.status.capacity.nvidia\.com/gpu} {.status.allocatable.nvidia\.com/gpu}' 2>/dev/null
}
kubelet_healthy() { http_ok "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz"; }
# configs_current: containerd and kubelet run with configs rendered from today's templates
# (each start saves the config it used as <config>.started; a newer template means it may not).
configs_current() {
  [[ -f $CONTAINERD_DIR/config.toml.started && -f $NODE_STATE/kubelet.yaml.started &&
     ! $NODE_SRC/containerd.toml.in -nt $CONTAINERD_DIR/config.toml.started &&
     ! $NODE_SRC/kubelet.yaml.in -nt $NODE_STATE/kubelet.yaml.started ]]
}
# stop_if_config_changed NAME CONFIG: stop NAME if it runs with another CONFIG than the one
# just rendered, so that it starts again below with this one. Pods keep running across a
# containerd or kubelet restart (their shims and containers stay).
stop_if_config_changed() {
  local name=$1 config=$2 pid i
  pid=$(pid_of "$name") || return 0
  ! cmp -s "$config" "$config.started" || return 0
  log "$name($pid) runs with another $(basename "$config"): restarting it"
  kill -TERM "$pid"
  for (( i = 0; i < 100; i++ )); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for (( i = 0; i < 50; i++ )); do alive "$pid" || return 0; sleep 0.1; done
}

# --- fast path -------------------------------------------------------------------------------
if running containerd && running kubelet && kubelet_healthy && node_ready && configs_current &&
   [[ $(node_gpus) == "$GPUS $GPUS" ]]; then
  log "real node $NODE_NAME: already up and Ready ($GPUS GPUs) ($(fmt_ms "$t_all"))"
  exit 0
fi

# --- host packages ---------------------------------------------------------------------------
t=$(now_ms)
missing=()
for p in "${NODE_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if (( ${#missing[@]} )); then
  mkdir -p "$LOG_DIR"
  log "installing ${missing[*]} (Debian packages)"
  # No systemd here, so the packages' services are not started; forbid it anyway: this
  # script runs its own containerd with its own config.
  apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >"$LOG_DIR/apt.log" 2>&1 || { tail -n 20 "$LOG_DIR/apt.log" >&2; return 1; }
  }
  if ! apt_install; then
    apt-get update -qq
    apt_install
  fi
  log "  installed in $(fmt_ms "$t")"
fi
# shellcheck disable=SC2034  # read by render() as ${!name}
RUNC=$(command -v runc) || die "runc not found after installing it"
CNI_BIN_DIR=/usr/lib/cni
[[ -x $CNI_BIN_DIR/bridge && -x $CNI_BIN_DIR/host-local ]] || die "CNI plugins missing in $CNI_BIN_DIR"

# --- host settings ---------------------------------------------------------------------------
# kubelet refuses to start with swap on (failSwapOn); this VM has none, say so plainly.
if [[ $(awk 'NR > 1' /proc/swaps | wc -l) -gt 0 ]]; then
  die "swap is on ($(awk 'NR > 1 {print $1}' /proc/swaps | tr '\n' ' ')): kubelet refuses it; swapoff -a"
fi
# Bridged pod traffic reaches the host's iptables only with br_netfilter; not needed for
# the host-network pods this project runs, so only a note when it is absent.
[[ -d /proc/sys/net/bridge ]] || modprobe br_netfilter 2>/dev/null || true

# kubelet's cgroupRoot must exist in every v1 hierarchy (it refuses to start otherwise):
# pods then live in <hierarchy>$KUBELET_CGROUP_ROOT/kubepods/..., apart from anything else.
while read -r _ mnt fstype _; do
  [[ $fstype == cgroup ]] || continue
  mkdir -p "$mnt$KUBELET_CGROUP_ROOT"
  if [[ -f $mnt/cpuset.cpus && -z $(<"$mnt$KUBELET_CGROUP_ROOT/cpuset.cpus") ]]; then
    cat "$mnt/cpuset.cpus" >"$mnt$KUBELET_CGROUP_ROOT/cpuset.cpus"   # v1 cpusets start empty
    cat "$mnt/cpuset.mems" >"$mnt$KUBELET_CGROUP_ROOT/cpuset.mems"
  fi
done </proc/mounts

# The API server reaches kubelet (logs, exec) by the node's Hostname address, which is the
# node name: make it resolve to loopback, where kubelet listens. (--node-ip=127.0.0.1 is
# refused by kubelet: "nodeIP can't be loopback address", and any other address of this
# host is not one to dial.)
if ! grep -Eq "^127\.0\.0\.1[[:space:]](.*[[:space:]])?$NODE_NAME([[:space:]]|\$)" /etc/hosts; then
  printf '127.0.0.1 %s   # trainwarden e2e real node (e2e/cluster/node/node-up.sh)\n' "$NODE_NAME" >>/etc/hosts
  log "added $NODE_NAME -> 127.0.0.1 to /etc/hosts"
fi

# --- images ---------------------------------------------------------------------------------
t=$(now_ms)
"$NODE_SRC/image.sh" | sed 's/^/  /'
# shellcheck disable=SC1090
source "$IMAGES_ENV"
log "images ready in $(fmt_ms "$t")"

# --- certificates and kubeconfig ---------------------------------------------------------------
mkdir -p "$NODE_STATE" "$CNI_CONF_DIR" "$CNI_DATA_DIR" "$NODE_PV_DIR" "$KUBELET_DIR" "$CONTAINERD_DIR"
node_cert() {  # node_cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: once per CA
  [[ -f $PKI_DIR/$1.crt && $PKI_DIR/$1.crt -nt $PKI_DIR/ca.crt ]] && return 0
  issue ca "$@"
}
# The Node authorizer and NodeRestriction know a kubelet by exactly this identity.
node_cert "kubelet-$NODE_NAME" "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
node_cert "kubelet-$NODE_NAME-serving" "/CN=system:node:$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:127.0.0.1"
umask 077
cat >"$KC.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainwarden-e2e
  cluster:
    server: $API_URL
    certificate-authority: $PKI_DIR/ca.crt
users:
- name: system:node:$NODE_NAME
  user:
    client-certificate: $PKI_DIR/kubelet-$NODE_NAME.crt
    client-key: $PKI_DIR/kubelet-$NODE_NAME.key
contexts:
- name: default
  context: {cluster: trainwarden-e2e, user: "system:node:$NODE_NAME"}
current-context: default
EOF
mv "$KC.tmp" "$KC"
umask 022

# kubectl logs/exec: the API server calls the kubelet with its kubelet-client cert (up.sh
# issues it and passes --kubelet-client-certificate); kubelet asks the API server whether
# that user may (Webhook authorization), so bind it as kubeadm does.
kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: trainwarden-e2e:apiserver-kubelet-client
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-apiserver-kubelet-client}
EOF
if pid=$(pid_of kube-apiserver) && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- '--kubelet-client-certificate='; then
  warn "kube-apiserver was started without --kubelet-client-certificate: kubectl logs/exec on $NODE_NAME will be refused until it is restarted by e2e/cluster/up.sh"
fi

# --- configs ----------------------------------------------------------------------------------
render() {  # render TEMPLATE OUT: replace @NAME@ with $NAME for every name used
  local tmpl=$1 out=$2 text name
  text=$(<"$tmpl")
  for name in $(grep -o '@[A-Z_]*@' "$tmpl" | sort -u | tr -d @); do
    [[ -n ${!name+x} ]] || die "$tmpl: @$name@ has no value"
    text=${text//@$name@/${!name}}
  done
  printf '%s\n' "$text" >"$out.tmp"
  mv "$out.tmp" "$out"
}
render "$NODE_SRC/containerd.toml.in" "$CONTAINERD_DIR/config.toml"
render "$NODE_SRC/cni.conflist.in" "$CNI_CONF_DIR/10-trainwarden.conflist"
render "$NODE_SRC/kubelet.yaml.in" "$NODE_STATE/kubelet.yaml"
# The local OCI registry (up.sh): containerd verifies it with the cluster CA, as a node does
# a private registry's (containerd's docs/hosts.md: one directory per host:port).
registry_hosts="$CONTAINERD_CERTS_DIR/127.0.0.1:$REGISTRY_PORT"
mkdir -p "$registry_hosts"
cat >"$registry_hosts/hosts.toml" <<EOF
# Generated by e2e/cluster/node/node-up.sh: the local registry (e2e/cluster/up.sh).
server = "https://127.0.0.1:$REGISTRY_PORT"

[host."https://127.0.0.1:$REGISTRY_PORT"]
  capabilities = ["pull", "resolve"]
  ca = "$PKI_DIR/ca.crt"
EOF
stop_if_config_changed kubelet "$NODE_STATE/kubelet.yaml"
stop_if_config_changed containerd "$CONTAINERD_DIR/config.toml"

# --- containerd --------------------------------------------------------------------------------
t=$(now_ms)
if running containerd; then
  log "containerd: running"
else
  [[ ! -S $CONTAINERD_SOCK ]] || rm -f "$CONTAINERD_SOCK"
  log "starting containerd (log $LOG_DIR/containerd.log)"
  log_from=1   # the first line of this start in containerd's log (start_bg appends)
  [[ ! -f $LOG_DIR/containerd.log ]] || log_from=$(( $(wc -l <"$LOG_DIR/containerd.log") + 1 ))
  start_bg containerd /usr/bin/containerd --config "$CONTAINERD_DIR/config.toml"
  cp "$CONTAINERD_DIR/config.toml" "$CONTAINERD_DIR/config.toml.started"
  until ctr_ version >/dev/null 2>&1; do
    ! exited containerd || { tail -n 40 "$LOG_DIR/containerd.log" >&2; die "containerd exited during startup"; }
    (( $(now_ms) - t < 30000 )) || { tail -n 40 "$LOG_DIR/containerd.log" >&2; die "containerd not answering after 30s"; }
    sleep 0.2
  done
  # `ctr version` answers before the CRI plugin has recovered its sandboxes; a kubelet
  # started then exits with "server is not initialized yet". The CRI plugin says
  # "Start streaming server" once it serves (containerd 1.6, Debian 12).
  until tail -n +"$log_from" "$LOG_DIR/containerd.log" | grep -q 'Start streaming server'; do
    (( $(now_ms) - t < 60000 )) || { warn "containerd's CRI plugin not serving after 60s"; break; }
    sleep 0.2
  done
  log "  containerd up in $(fmt_ms "$t")"
fi
t=$(now_ms)
import_images | sed 's/^/  /'
log "images in containerd ($(fmt_ms "$t"))"

# --- kubelet ----------------------------------------------------------------------------------
t=$(now_ms)
if running kubelet; then
  log "kubelet: running"
else
  if port_busy "$KUBELET_PORT" || port_busy "$KUBELET_HEALTHZ_PORT"; then
    die "kubelet ports $KUBELET_PORT/$KUBELET_HEALTHZ_PORT are in use by a process this harness did not start: $(ss -Hltnp "( sport = :$KUBELET_PORT or sport = :$KUBELET_HEALTHZ_PORT )" | head -1)"
  fi
  log "starting kubelet for node $NODE_NAME (log $LOG_DIR/kubelet.log)"
  start_bg kubelet "$BIN_DIR/kubelet" \
    --config="$NODE_STATE/kubelet.yaml" \
    --kubeconfig="$KC" \
    --root-dir="$KUBELET_DIR" \
    --hostname-override="$NODE_NAME" \
    --node-labels="trainwarden.dev/real-node=true,type=real" \
    --v=1
  cp "$NODE_STATE/kubelet.yaml" "$NODE_STATE/kubelet.yaml.started"
fi
until kubelet_healthy && node_ready; do
  ! exited kubelet || { tail -n 40 "$LOG_DIR/kubelet.log" >&2; die "kubelet exited during startup"; }
  if (( $(now_ms) - t > 90000 )); then
    kubectl get node "$NODE_NAME" -o wide >&2 || true
    tail -n 40 "$LOG_DIR/kubelet.log" >&2
    die "node $NODE_NAME not Ready after 90s"
  fi
  sleep 0.5
done
log "node $NODE_NAME Ready after $(fmt_ms "$t")"

# --- extended resource: nvidia.com/gpu --------------------------------------------------------
# Not from a device plugin (there are no GPUs): capacity added to the node's status, which
# kubelet then carries over into allocatable. kubelet zeroes extended resources it does not
# know when it starts with a fresh root dir, so this is redone on every start. Allocatable
# is patched too (to the same value kubelet derives), so the scheduler need not wait for
# kubelet's next status update.
t=$(now_ms)
if [[ $(node_gpus) != "$GPUS "* ]]; then
  kubectl patch node "$NODE_NAME" --subresource=status --type=json \
    -p "[{\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$GPUS\"},
         {\"op\": \"add\", \"path\": \"/status/allocatable/nvidia.com~1gpu\", \"value\": \"$GPUS\"}]" >/dev/null
fi
until [[ $(node_gpus) == "$GPUS $GPUS" ]]; do   # allocatable follows at kubelet's next status update
  (( $(now_ms) - t < 30000 )) || die "node $NODE_NAME: nvidia.com/gpu capacity/allocatable is '$(node_gpus)', not $GPUS"
  sleep 0.5
done
log "node $NODE_NAME advertises nvidia.com/gpu: $GPUS (allocatable after $(fmt_ms "$t"))"
log "real node up in $(fmt_ms "$t_all")"
