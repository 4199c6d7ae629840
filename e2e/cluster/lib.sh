# shellcheck shell=bash
# Shared settings and helpers for build.sh / up.sh / down.sh. Source it; do not run it.
# shellcheck disable=SC2034  # variables are used by the scripts that source this file

# --- layout ------------------------------------------------------------------
CLUSTER_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"      # e2e/cluster
REPO_ROOT="$(cd "$CLUSTER_SRC/../.." && pwd)"
CLUSTER_DIR="$REPO_ROOT/.cluster"                                  # caches + runtime (git-ignored)
BIN_DIR="$CLUSTER_DIR/bin"
PROM_DIR="$CLUSTER_DIR/prometheus"                                 # extracted Debian package (promtool)
PROM_BIN="$BIN_DIR/prometheus"                                     # built from its Go module
STATE_DIR="$CLUSTER_DIR/state"                                     # removed by down.sh
PKI_DIR="$STATE_DIR/pki"
PID_DIR="$STATE_DIR/pids"
LOG_DIR="$STATE_DIR/logs"
KUBECONFIG_PATH="$CLUSTER_DIR/kubeconfig"                          # contract: admin kubeconfig
ENV_FILE="$CLUSTER_DIR/cluster.env"                                # contract: sourceable env
export CLUSTER_SRC REPO_ROOT CLUSTER_DIR BIN_DIR PROM_DIR PROM_BIN STATE_DIR PKI_DIR PID_DIR LOG_DIR

# --- pinned versions ---------------------------------------------------------
K8S_VERSION="v1.34.4"
KSM_VERSION="v2.20.0"      # k8s.io/kube-state-metrics/v2: the independent ledger of requests
KWOK_VERSION="v0.8.0"
VERSITYGW_VERSION="v1.8.0"  # Versity S3 Gateway: a real S3 server over a directory
ETCD_VERSION="v3.6.16"     # informational; the pin lives in gobuild/etcd/go.mod
KUEUE_VERSION="v0.17.0"    # sigs.k8s.io/kueue: the real controller-manager, CRDs and webhooks
REGISTRY_VERSION="v3.1.2"  # github.com/distribution/distribution/v3: the CNCF OCI registry
# github.com/prometheus/alertmanager: the newest that `go install` builds from its module
# (from v0.32 its UI is an npm build the module does not carry: "pattern app/dist: no
# matching files found").
ALERTMANAGER_VERSION="v0.31.1"
# github.com/prometheus-operator/prometheus-operator: manages the Prometheus the e2e tests
# and the demo use (the real node runs it); the only version the module proxy serves here.
PROM_OPERATOR_VERSION="v0.85.0"
# github.com/prometheus/prometheus v0.55.1 is Prometheus 2.55.1, the last 2.x: Debian's 2.42
# is built without Kubernetes service discovery, which every ServiceMonitor needs.
PROM_VERSION="v0.55.1"
PROM_OPERATOR_DIR="$CLUSTER_DIR/prometheus-operator"              # its CRDs, copied at build

# --- ports (all bound to 127.0.0.1) ------------------------------------------
# TRAINWARDEN_CLUSTER_PORT_OFFSET shifts every port, so a second copy of this directory
# (with its own .cluster) can run next to the main cluster, e.g. to self-test the harness.
# Use a multiple of 100: small offsets make ports collide (20247+10 = 20257).
_port_offset=${TRAINWARDEN_CLUSTER_PORT_OFFSET:-0}
ETCD_CLIENT_PORT=$(( 12379 + _port_offset ))
ETCD_PEER_PORT=$(( 12380 + _port_offset ))
APISERVER_PORT=$(( 16443 + _port_offset ))
KCM_PORT=$(( 20257 + _port_offset ))
SCHEDULER_PORT=$(( 20259 + _port_offset ))
KWOK_PORT=$(( 20247 + _port_offset ))
KSM_PORT=$(( 20284 + _port_offset ))            # kube-state-metrics: HTTP /metrics, /livez
KSM_TELEMETRY_PORT=$(( 20285 + _port_offset ))  # its own metrics, /readyz
PROMETHEUS_PORT=$(( 19090 + _port_offset ))
EXPORTER_PORT=$(( 19400 + _port_offset ))
S3_PORT=$(( 19000 + _port_offset ))
KUEUE_HEALTH_PORT=$(( 20281 + _port_offset ))   # HTTP /healthz, /readyz
KUEUE_METRICS_PORT=$(( 20282 + _port_offset ))  # HTTPS /metrics (authn/authz by the API server)
KUEUE_WEBHOOK_PORT=$(( 20283 + _port_offset ))  # HTTPS admission + CRD conversion webhooks
REGISTRY_PORT=$(( 15000 + _port_offset ))       # HTTPS OCI registry (images and charts)
ALERTMANAGER_PORT=$(( 19093 + _port_offset ))
ALERT_RECEIVER_PORT=$(( 19094 + _port_offset ))  # the e2e tests' webhook receiver (not started here)
PROM_OPERATOR_PORT=$(( 20286 + _port_offset ))   # Prometheus Operator: /healthz, /metrics
RELOADER_PORT=$(( 20287 + _port_offset ))        # its config reloader beside Prometheus (host network)
INIT_RELOADER_PORT=$(( 20288 + _port_offset ))   # the same, as the pod's init container

# Namespaces whose Jobs Kueue manages (its Job webhooks and managedJobsNamespaceSelector):
# only those labelled so, to keep every other test independent of Kueue's health.
KUEUE_NAMESPACE_LABEL="kueue.trainwarden.dev/enabled"

# Components every Go build must see (no toolchain downloads, allow go.sum updates,
# static binaries).
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0

# --- output helpers ----------------------------------------------------------
_t0_script=$SECONDS
log()  { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
warn() { printf '[%s] WARN: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$*" >&2; exit 1; }

# now_ms: wall clock in milliseconds (for phase timings).
now_ms() { date +%s%3N; }
# fmt_ms START_MS: seconds elapsed since START_MS, one decimal.
fmt_ms() {
  local d=$(( $(now_ms) - $1 ))
  printf '%d.%01ds' $(( d / 1000 )) $(( (d % 1000) / 100 ))
}

# --- process helpers ---------------------------------------------------------
# pid_of NAME: prints the pid recorded for NAME if that process is still alive and
# still the one we started (its command line mentions the repository path; guards
# against pid reuse).
pid_of() {
  local f="$PID_DIR/$1.pid" pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$REPO_ROOT/" || return 1
  printf '%s\n' "$pid"
}

# alive PID: true when PID exists and is not a zombie.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

# running NAME: true when NAME's recorded process is alive.
running() { pid_of "$1" >/dev/null; }

# exited NAME: true when the process start_bg just recorded for NAME is gone. Not `! running`:
# while a fresh process execs, its /proc/PID/cmdline is briefly empty, and a startup loop
# would report a healthy daemon as dead (a kubelet "exited during startup" that was running).
exited() {
  local pid
  pid=$(cat "$PID_DIR/$1.pid" 2>/dev/null) || return 0
  ! alive "$pid"
}

# start_bg NAME CMD...: start CMD detached (own session, so a test runner killing its
# process group does not take the cluster down), log to logs/NAME.log, pid to pids/NAME.pid.
start_bg() {
  local name=$1; shift
  mkdir -p "$PID_DIR" "$LOG_DIR"
  printf '\n===== %s starting %s =====\n' "$(date -Is)" "$name" >>"$LOG_DIR/$name.log"
  # 8>&- 9>&-: do not leak the build/up lock descriptors into the daemon (it would hold
  # the lock for its whole life and block the next up.sh/down.sh).
  setsid "$@" </dev/null >>"$LOG_DIR/$name.log" 2>&1 8>&- 9>&- &
  echo $! >"$PID_DIR/$name.pid"
}

# harness_pids: every live daemon of this harness (matched by the absolute path of its
# binary or script, so a concurrent `.cluster/bin/kubectl ...` is not included).
harness_pids() {
  local p cmd
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$$" || $p == "$BASHPID" ]] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") || continue
    [[ -n $cmd ]] || continue
    case $cmd in
      "$BIN_DIR/etcd "*|"$BIN_DIR/kube-apiserver "*|"$BIN_DIR/kube-controller-manager "*|\
      "$BIN_DIR/kube-scheduler "*|"$BIN_DIR/kwok "*|"$PROM_BIN "*|\
      *" $CLUSTER_SRC/dcgm_exporter_sim.py "*|"$BIN_DIR/versitygw "*|\
      "$BIN_DIR/kueue "*|"$BIN_DIR/registry "*|"$BIN_DIR/alertmanager "*|"$BIN_DIR/kubelet "*|"/usr/bin/containerd --config $STATE_DIR/node/"*)
        printf '%s\n' "$p" ;;
      "$BIN_DIR/kube-state-metrics "*|"$BIN_DIR/prometheus-operator "*) printf '%s\n' "$p" ;;
    esac
  done
}

# take_lock FD FILE: exclusive flock, waiting at most 10 minutes.
take_lock() {
  local fd=$1 file=$2
  eval "exec $fd>\"\$file\""
  flock -w 600 "$fd" || die "could not lock $file within 600s (another build/up/down running?)"
}

# http_ok URL [curl args...]: true when URL answers 2xx within 2 s.
http_ok() {
  local url=$1; shift
  curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null
}

# port_busy PORT: true when something listens on 127.0.0.1:PORT (or the wildcard).
port_busy() {
  ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# --- PKI (up.sh issues the cluster certificates, node/node-up.sh the kubelet's) --------
# TLS keys are ECDSA P-256 (generated instantly; RSA-2048 added ~2 s to a cold start).
EC_KEY=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)

# new_ca NAME CN: self-signed CA.
new_ca() {
  openssl req -x509 "${EC_KEY[@]}" -nodes -keyout "$PKI_DIR/$1.key" -out "$PKI_DIR/$1.crt" \
    -days 3650 -sha256 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

# issue CA NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: key + cert signed by CA.
issue() {
  local ca=$1 name=$2 subj=$3 eku=$4 san=${5:-}
  openssl req -new "${EC_KEY[@]}" -nodes -keyout "$PKI_DIR/$name.key" \
    -out "$PKI_DIR/$name.csr" -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$eku"
    [[ -z $san ]] || echo "subjectAltName=$san"
  } >"$PKI_DIR/$name.ext"
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/$ca.crt" -CAkey "$PKI_DIR/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -sha256 \
    -extfile "$PKI_DIR/$name.ext" -out "$PKI_DIR/$name.crt" 2>/dev/null
  rm -f "$PKI_DIR/$name.csr" "$PKI_DIR/$name.ext"
}
