#!/usr/bin/env bash
# Start (or repair) the local control plane: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok (fake nodes and pods), Prometheus and the dcgm-exporter stand-in,
# Kueue's controller-manager (its CRDs and webhooks installed first), and (as root) the real
# node: kubelet + containerd (node/node-up.sh; TRAINWARDEN_REAL_NODE=0 leaves it out).
# Idempotent: when everything is up and healthy it returns in about a second; when some
# process died it restarts only that one. Writes .cluster/kubeconfig and .cluster/cluster.env.
# Usage: e2e/cluster/up.sh        (tear down with e2e/cluster/down.sh)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$CLUSTER_DIR"
take_lock 9 "$CLUSTER_DIR/.up.lock"   # serialise concurrent up.sh / down.sh runs

API_URL="https://127.0.0.1:$APISERVER_PORT"
KC_DIR="$STATE_DIR/kubeconfigs"
NODES_FILE="$CLUSTER_SRC/nodes.yaml"
EXPECTED_NODES=$(grep -c '^kind: Node' "$NODES_FILE")
PYTHON="$REPO_ROOT/.venv/bin/python"
[[ -x $PYTHON ]] || PYTHON=$(command -v python3)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok prometheus dcgm-exporter s3 alertmanager registry kueue)
NODE_UP="$CLUSTER_SRC/node/node-up.sh"
REAL_NODE_NAME="${TRAINWARDEN_REAL_NODE_NAME:-real-0}"
# The real node needs root (containerd, runc, cgroups, mounts); without it, the rest runs.
want_real_node() { [[ ${TRAINWARDEN_REAL_NODE:-1} != 0 ]] && (( EUID == 0 )); }
real_node_ok() {
  running kubelet && running containerd &&
    [[ $(kubectl get node "$REAL_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

kubectl() { "$BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# phase NAME: start timing a phase; phase_end: print it.
phase() { _phase_name=$1; _phase_t=$(now_ms); }
phase_end() { log "phase $_phase_name: ${1:-done} in $(fmt_ms "$_phase_t")"; }

# --- health checks (each must answer within ~2 s) ----------------------------------------
healthy() {
  case $1 in
    etcd) curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"' ;;
    kube-apiserver) http_ok "$API_URL/readyz" --cacert "$PKI_DIR/ca.crt" \
                      --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" ;;
    kube-controller-manager) http_ok "https://127.0.0.1:$KCM_PORT/healthz" -k ;;
    kube-scheduler) http_ok "https://127.0.0.1:$SCHEDULER_PORT/healthz" -k ;;
    kwok) http_ok "http://127.0.0.1:$KWOK_PORT/healthz" ;;
    # livez reaches the API server with its credentials; readyz: its metrics registered.
    kube-state-metrics) http_ok "http://127.0.0.1:$KSM_PORT/livez" &&
                          http_ok "http://127.0.0.1:$KSM_TELEMETRY_PORT/readyz" ;;
    prometheus) http_ok "http://127.0.0.1:$PROMETHEUS_PORT/-/ready" ;;
    prometheus-operator) http_ok "http://127.0.0.1:$PROM_OPERATOR_PORT/healthz" ;;
    dcgm-exporter) http_ok "http://127.0.0.1:$EXPORTER_PORT/healthz" ;;
    s3) http_ok "http://127.0.0.1:$S3_PORT/healthz" ;;
    # The OCI distribution API's version check: 200 once the registry serves, over TLS.
    registry) http_ok "https://127.0.0.1:$REGISTRY_PORT/v2/" --cacert "$PKI_DIR/ca.crt" ;;
    alertmanager) http_ok "http://127.0.0.1:$ALERTMANAGER_PORT/-/ready" ;;
    # readyz, not healthz: ready once the webhook server serves (Jobs in managed
    # namespaces and Kueue's own objects cannot be created before that).
    kueue) http_ok "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" ;;
    *) die "unknown component $1" ;;
  esac
}

port_of() {
  case $1 in
    etcd) echo "$ETCD_CLIENT_PORT" ;; kube-apiserver) echo "$APISERVER_PORT" ;;
    kube-state-metrics) echo "$KSM_PORT" ;;
    kube-controller-manager) echo "$KCM_PORT" ;; kube-scheduler) echo "$SCHEDULER_PORT" ;;
    kwok) echo "$KWOK_PORT" ;; prometheus) echo "$PROMETHEUS_PORT" ;;
    prometheus-operator) echo "$PROM_OPERATOR_PORT" ;;
    dcgm-exporter) echo "$EXPORTER_PORT" ;; s3) echo "$S3_PORT" ;;
    registry) echo "$REGISTRY_PORT" ;;
    alertmanager) echo "$ALERTMANAGER_PORT" ;;
    kueue) echo "$KUEUE_HEALTH_PORT" ;;
  esac
}

fail_with_log() {  # fail_with_log NAME MESSAGE
  local logf="$LOG_DIR/$1.log"
  printf '[%s] ERROR: %s\n' "$(date +%H:%M:%S)" "$2" >&2
  if [[ -f $logf ]]; then
    printf -- '----- last 40 lines of %s -----\n' "$logf" >&2
    tail -n 40 "$logf" >&2
    printf -- '-----\n' >&2
  fi
  exit 1
}

# wait_healthy NAME TIMEOUT_S: poll health; fail fast if the process exits.
wait_healthy() {
  local name=$1 timeout=$2 t
  t=$(now_ms)
  until healthy "$name"; do
    ! exited "$name" || fail_with_log "$name" "$name exited during startup"
    (( $(now_ms) - t < timeout * 1000 )) ||
      fail_with_log "$name" "$name not healthy after ${timeout}s"
    sleep 0.3
  done
  log "  $name healthy after $(fmt_ms "$t")"
}

# --- PKI -----------------------------------------------------------------------------
# new_ca and issue (a key and certificate signed by a CA) are in lib.sh.

# The API server's identity towards kubelets (kubectl logs/exec/port-forward), as kubeadm's
# apiserver-kubelet-client; node/node-up.sh binds it to system:kubelet-api-admin.
issue_kubelet_client() {
  issue ca apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" clientAuth
}

# Kueue: its own identity (bound to Kueue's generated ClusterRole, see kueue_manifests.py)
# and one serving cert for its webhook and metrics servers, both on 127.0.0.1.
issue_kueue() {
  issue ca kueue "/CN=kueue-controller-manager" clientAuth
  issue ca kueue-serving "/CN=kueue-webhook" serverAuth "IP:127.0.0.1,DNS:localhost"
}

# The API server's identity towards admission webhooks that ask for one (trainwarden's
# --webhook-client-ca): its own CA, so that no other cluster certificate (an admin's, a
# node's) is a webhook client; presented through the admission configuration below.
issue_webhook_client() {
  new_ca webhook-client-ca trainwarden-e2e-webhook-client-ca
  issue webhook-client-ca apiserver-webhook-client "/CN=kube-apiserver-webhook-client" clientAuth
}

# The OCI registry's serving certificate: the cluster CA signs it, so helm (--ca-file), crane
# (SSL_CERT_FILE) and the real node's containerd (certs.d/<host>/hosts.toml) verify it.
issue_registry() {
  issue ca registry-serving "/CN=trainwarden-e2e-registry" serverAuth "IP:127.0.0.1,DNS:localhost"
}

gen_pki() {
  rm -rf "$PKI_DIR"
  mkdir -p "$PKI_DIR"
  chmod 700 "$PKI_DIR"
  new_ca ca trainwarden-e2e-ca
  issue ca apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
  issue ca admin "/O=system:masters/CN=trainwarden-admin" clientAuth
  issue ca kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  issue ca kube-scheduler "/CN=system:kube-scheduler" clientAuth
  issue_kubelet_client
  issue_kueue
  issue_webhook_client
  issue_registry
  # kwok acts for every fake node (status, leases, pod status, deletes): cluster-admin.
  issue ca kwok "/O=system:masters/CN=kwok-controller" clientAuth
  # Front proxy (aggregation layer): a separate CA, as kubeadm does. Configuring it also
  # publishes requestheader-client-ca-file, which KCM/scheduler delegated auth expects.
  new_ca front-proxy-ca trainwarden-e2e-front-proxy-ca
  issue front-proxy-ca front-proxy-client "/CN=front-proxy-client" clientAuth
  # Service-account token signing pair (apiserver verifies, KCM's token controller signs).
  openssl genrsa -out "$PKI_DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
  touch "$PKI_DIR/.complete"
}

# write_kubeconfig FILE USER CERT_NAME: kubeconfig with embedded credentials.
write_kubeconfig() {
  local file=$1 user=$2 cert=$3
  mkdir -p "$(dirname "$file")"
  cat >"$file.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainwarden-e2e
  cluster:
    server: $API_URL
    certificate-authority-data: $(base64 -w0 "$PKI_DIR/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$PKI_DIR/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI_DIR/$cert.key")
contexts:
- name: trainwarden-e2e
  context:
    cluster: trainwarden-e2e
    user: $user
    namespace: default
current-context: trainwarden-e2e
EOF
  chmod 600 "$file.tmp"
  mv "$file.tmp" "$file"
}

# The admission configuration: the webhook plugins present the client certificate above to
# any webhook server that requests one ('*': every webhook; servers that do not ask, as
# Kueue's, never see it).
ADMISSION_DIR="$STATE_DIR/kube-apiserver/admission"
write_admission_config() {
  local plugin
  mkdir -p "$ADMISSION_DIR"
  cat >"$ADMISSION_DIR/webhook-clients.kubeconfig" <<EOF
apiVersion: v1
kind: Config
users:
- name: '*'
  user:
    client-certificate: $PKI_DIR/apiserver-webhook-client.crt
    client-key: $PKI_DIR/apiserver-webhook-client.key
EOF
  {
    echo "apiVersion: apiserver.config.k8s.io/v1"
    echo "kind: AdmissionConfiguration"
    echo "plugins:"
    for plugin in MutatingAdmissionWebhook ValidatingAdmissionWebhook; do
      echo "- name: $plugin"
      echo "  configuration:"
      echo "    apiVersion: apiserver.config.k8s.io/v1"
      echo "    kind: WebhookAdmissionConfiguration"
      echo "    kubeConfigFile: $ADMISSION_DIR/webhook-clients.kubeconfig"
    done
  } >"$ADMISSION_DIR/config.yaml"
}

# --- component launchers -------------------------------------------------------------
start_etcd() {
  start_bg etcd "$BIN_DIR/etcd" --name=node0 --data-dir="$STATE_DIR/etcd" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="node0=http://127.0.0.1:$ETCD_PEER_PORT" \
    --auto-compaction-retention=1 --quota-backend-bytes=8589934592 \
    --unsafe-no-fsync=true
}

start_kube_apiserver() {
  write_admission_config
  start_bg kube-apiserver "$BIN_DIR/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
    --cert-dir="$STATE_DIR/kube-apiserver" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI_DIR/sa.pub" \
    --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 \
    --endpoint-reconciler-type=none \
    --requestheader-client-ca-file="$PKI_DIR/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI_DIR/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI_DIR/front-proxy-client.key" \
    --allow-privileged=true \
    --kubelet-client-certificate="$PKI_DIR/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI_DIR/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI_DIR/ca.crt" \
    --kubelet-preferred-address-types=Hostname \
    --admission-control-config-file="$ADMISSION_DIR/config.yaml"
}

start_kube_controller_manager() {
  local kc="$KC_DIR/kube-controller-manager.kubeconfig"
  start_bg kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --cert-dir="$STATE_DIR/kube-controller-manager" \
    --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
    --leader-elect=false \
    --root-ca-file="$PKI_DIR/ca.crt" \
    --service-account-private-key-file="$PKI_DIR/sa.key" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI_DIR/ca.crt" --cluster-signing-key-file="$PKI_DIR/ca.key"
}

start_kube_scheduler() {
  local kc="$KC_DIR/kube-scheduler.kubeconfig"
  start_bg kube-scheduler "$BIN_DIR/kube-scheduler" \
    --kubeconfig="$kc" --authentication-kubeconfig="$kc" --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
    --cert-dir="$STATE_DIR/kube-scheduler" \
    --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics \
    --leader-elect=false
}

# kwok ships no default stages when run without kwokctl: assemble them from the pinned
# module (node/fast, node/heartbeat-with-lease, pod/fast minus pod-complete) plus ours.
assemble_stages() {
  local mod f out="$STATE_DIR/kwok/stages.yaml"
  mod="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK_VERSION"
  if [[ ! -d $mod/kustomize/stage ]]; then
    log "  downloading sigs.k8s.io/kwok@$KWOK_VERSION module for its stage definitions"
    (cd "$CLUSTER_SRC" && go mod download "sigs.k8s.io/kwok@$KWOK_VERSION")
  fi
  mkdir -p "$STATE_DIR/kwok"
  {
    echo "# Generated by e2e/cluster/up.sh from sigs.k8s.io/kwok@$KWOK_VERSION and e2e/cluster/stages/"
    for f in "$mod/kustomize/stage/node/fast/node-initialize.yaml" \
             "$mod/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
             "$mod/kustomize/stage/pod/fast/pod-ready.yaml" \
             "$mod/kustomize/stage/pod/fast/pod-delete.yaml" \
             "$CLUSTER_SRC"/stages/*.yaml; do
      [[ -f $f ]] || die "missing stage file $f"
      echo "---"
      echo "# source: ${f#"$mod/"}"
      cat "$f"
    done
  } >"$out.tmp"
  mv "$out.tmp" "$out"
}

start_kwok() {
  assemble_stages
  # A restarted kwok only takes over a node once the lease held by its previous instance
  # expires (--node-lease-duration-seconds, 40 s): until then no pod on it moves. Drop
  # the kwok nodes' stale leases (not the real node's: its kubelet holds that one); the
  # new instance recreates them at once.
  if healthy kube-apiserver; then
    local leases
    leases=$(kubectl get nodes -l type=kwok -o jsonpath='{.items[*].metadata.name}' 2>/dev/null || true)
    if [[ -n $leases ]]; then
      # shellcheck disable=SC2086  # one argument per node name
      kubectl delete lease -n kube-node-lease $leases --ignore-not-found --wait=false 2>/dev/null | sed 's/^/  /' || true
    fi
  fi
  start_bg kwok "$BIN_DIR/kwok" \
    --kubeconfig="$KC_DIR/kwok.kubeconfig" \
    --config="$STATE_DIR/kwok/stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --cidr=10.0.0.0/16 --node-ip=10.1.0.1 \
    --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$KWOK_PORT"
}

start_prometheus() {
  local dir="$STATE_DIR/prometheus"
  mkdir -p "$dir/data"
  cat >"$dir/prometheus.yml" <<EOF
# Generated by e2e/cluster/up.sh
global:
  scrape_interval: 5s
  evaluation_interval: 5s
  scrape_timeout: 4s
scrape_configs:
- job_name: dcgm-exporter
  # dcgm-exporter's own namespace/pod/container labels name the GPU's consumer; keep
  # them (the NVIDIA ServiceMonitor sets honorLabels: true for the same reason).
  honor_labels: true
  static_configs:
  - targets: ['127.0.0.1:$EXPORTER_PORT']
# The same exporter as GPU Operator's ServiceMonitor has it scraped: honorLabels false, and
# the target labels Prometheus Operator gives a ServiceMonitor's endpoint (the exporter's
# own namespace, pod, container, service, endpoint). The consumer's labels arrive as
# exported_namespace/exported_pod/exported_container (pods PUT with view serviceMonitor).
- job_name: serviceMonitor/gpu-operator/nvidia-dcgm-exporter/0
  honor_labels: false
  metrics_path: /metrics
  params:
    view: [serviceMonitor]
  static_configs:
  - targets: ['127.0.0.1:$EXPORTER_PORT']
    labels:
      job: nvidia-dcgm-exporter   # a ServiceMonitor's job label: its Service's name
      namespace: gpu-operator
      pod: nvidia-dcgm-exporter-sim
      container: nvidia-dcgm-exporter
      service: nvidia-dcgm-exporter
      endpoint: gpu-metrics
- job_name: prometheus
  static_configs:
  - targets: ['127.0.0.1:$PROMETHEUS_PORT']
# trainwarden operators the tests start register their metrics port here (one JSON file
# each), so the chart's alerts and dashboard queries run against real series.
- job_name: trainwarden-metrics
  file_sd_configs:
  - files: ['$dir/targets/*.json']
    refresh_interval: 5s
# kube-state-metrics as kube-prometheus-stack's ServiceMonitor has it scraped: job
# kube-state-metrics, honorLabels true (a pod's namespace/pod/container are the pod's, not
# the exporter's), the endpoint's target labels. Every second, not every 5 s: the ledger
# cross-check integrates its series, and the scrape interval is its resolution.
- job_name: kube-state-metrics
  scrape_interval: 1s
  scrape_timeout: 1s
  honor_labels: true
  static_configs:
  - targets: ['127.0.0.1:$KSM_PORT']
    labels:
      namespace: monitoring
      pod: kube-state-metrics-0
      container: kube-state-metrics
      service: kube-state-metrics
      endpoint: http
# Rule files the tests write (the chart's PrometheusRule groups), read on POST /-/reload;
# alerts go to the harness's Alertmanager.
rule_files: ['$dir/rules/*.yaml']
alerting:
  alertmanagers:
  - static_configs:
    - targets: ['127.0.0.1:$ALERTMANAGER_PORT']
EOF
  mkdir -p "$dir/targets" "$dir/rules"
  start_bg prometheus "$PROM_BIN" \
    --config.file="$dir/prometheus.yml" \
    --storage.tsdb.path="$dir/data" \
    --storage.tsdb.retention.time=7d \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" \
    --web.enable-lifecycle --web.enable-admin-api
}

# Alertmanager: every alert to one webhook receiver, the one e2e/test_alerting.py serves on
# ALERT_RECEIVER_PORT while it runs (at other times deliveries fail and are retried, which
# nothing waits on). Grouped by alert and budget, sent after a second. One instance: no
# cluster listener (--cluster.listen-address=).
start_alertmanager() {
  local dir="$STATE_DIR/alertmanager"
  mkdir -p "$dir/data"
  cat >"$dir/alertmanager.yml" <<EOF
# Generated by e2e/cluster/up.sh
route:
  receiver: e2e
  group_by: [alertname, budget]
  group_wait: 1s
  group_interval: 5s
  repeat_interval: 1h
receivers:
- name: e2e
  webhook_configs:
  - url: http://127.0.0.1:$ALERT_RECEIVER_PORT/alerts
    send_resolved: false
EOF
  start_bg alertmanager "$BIN_DIR/alertmanager" \
    --config.file="$dir/alertmanager.yml" \
    --storage.path="$dir/data" \
    --web.listen-address="127.0.0.1:$ALERTMANAGER_PORT" \
    --cluster.listen-address=
}

# With the managed Prometheus it is scraped through GPU Operator's ServiceMonitor, at the
# real node's address (an EndpointSlice may not name loopback): it listens on every address.
start_dcgm_exporter() {
  local host=127.0.0.1
  if want_real_node; then host=0.0.0.0; fi
  start_bg dcgm-exporter "$PYTHON" -u "$CLUSTER_SRC/dcgm_exporter_sim.py" \
    --host "$host" --port "$EXPORTER_PORT"
}

# The S3 server for CheckpointPolicy's object storage: one root account (the tests put its
# keys in a Secret, as a user would), buckets are directories under state/s3.
s3_keys() {  # the root account's keys, generated with the cluster's PKI
  S3_ACCESS_KEY=trainwarden-e2e
  [[ -s $PKI_DIR/s3.secret ]] || openssl rand -hex 20 >"$PKI_DIR/s3.secret"
  S3_SECRET_KEY=$(<"$PKI_DIR/s3.secret")
}
# The CNCF Distribution registry (OCI distribution API): images and charts `make release`
# pushes, the real node pulls. TLS with the cluster CA's certificate, no authentication,
# loopback only; blobs are files under state/registry (gone with down.sh), deletes allowed
# (a test may clean up). OTEL_TRACES_EXPORTER=none: it would otherwise export its traces
# to an OTLP collector on localhost:4318 that is not there.
start_registry() {
  local dir="$STATE_DIR/registry"
  mkdir -p "$dir/data"
  cat >"$dir/config.yml" <<EOF
# Generated by e2e/cluster/up.sh (registry $REGISTRY_VERSION); e2e/cluster/README.md says why.
version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
  tls:
    certificate: $PKI_DIR/registry-serving.crt
    key: $PKI_DIR/registry-serving.key
EOF
  start_bg registry env OTEL_TRACES_EXPORTER=none "$BIN_DIR/registry" serve "$dir/config.yml"
}

start_s3() {
  s3_keys
  mkdir -p "$STATE_DIR/s3"
  start_bg s3 "$BIN_DIR/versitygw" --access "$S3_ACCESS_KEY" --secret "$S3_SECRET_KEY" \
    --port "127.0.0.1:$S3_PORT" --health /healthz --quiet posix "$STATE_DIR/s3"
}

# --- Kueue ------------------------------------------------------------------------------
KUEUE_DIR="$STATE_DIR/kueue"

# kueue_manifests: CRDs, RBAC and webhook configurations from the pinned module, rewritten
# for a process on 127.0.0.1 (kueue_manifests.py says how); server-side applied (the
# Workload CRD is too large for client-side apply's annotation) when they changed since
# the last successful apply. Waits until the CRDs are Established.
kueue_manifests() {
  local f mod applied=()
  mod="$(go env GOMODCACHE)/sigs.k8s.io/kueue@$KUEUE_VERSION"
  if [[ ! -d $mod/config/components ]]; then
    log "  downloading sigs.k8s.io/kueue@$KUEUE_VERSION module for its manifests"
    (cd "$CLUSTER_SRC" && go mod download "sigs.k8s.io/kueue@$KUEUE_VERSION")
  fi
  mkdir -p "$KUEUE_DIR/manifests"
  "$PYTHON" "$CLUSTER_SRC/kueue_manifests.py" --module "$mod" --ca "$PKI_DIR/ca.crt" \
    --webhook-port "$KUEUE_WEBHOOK_PORT" --namespace-label "$KUEUE_NAMESPACE_LABEL" \
    --user kueue-controller-manager --out "$KUEUE_DIR/manifests"
  for f in crds rbac webhooks; do
    f="$KUEUE_DIR/manifests/$f.json"
    cmp -s "$f" "$f.applied" && continue
    kubectl apply --server-side --force-conflicts --field-manager=trainwarden-e2e-up -f "$f" >/dev/null
    cp "$f" "$f.applied"
    applied+=("$(basename "$f" .json)")
  done
  kubectl wait --for=condition=Established --timeout=60s crd -l app.kubernetes.io/name=kueue >/dev/null
  log "  kueue manifests: $( ((${#applied[@]})) && echo "applied ${applied[*]}" || echo unchanged)"
}

# kueue_config: the Configuration (config.kueue.x-k8s.io/v1beta2) the process reads.
kueue_config() {
  cat >"$KUEUE_DIR/config.yaml" <<EOF
# Generated by e2e/cluster/up.sh (Kueue $KUEUE_VERSION); e2e/cluster/README.md says why.
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $KUEUE_DIR/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels:
    $KUEUE_NAMESPACE_LABEL: "true"
  matchExpressions:
  - {key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}
integrations:
  frameworks: ["batch/job"]
featureGates:
  VisibilityOnDemand: false
  MultiKueue: false
  TopologyAwareScheduling: false
controller:
  groupKindConcurrency:
    Job.batch: 5
    Workload.kueue.x-k8s.io: 5
    LocalQueue.kueue.x-k8s.io: 1
    Cohort.kueue.x-k8s.io: 1
    ClusterQueue.kueue.x-k8s.io: 1
    ResourceFlavor.kueue.x-k8s.io: 1
clientConnection:
  qps: 50
  burst: 100
EOF
}

# Kueue with internal cert management off reads its metrics serving cert from a fixed path,
# /etc/kueue/metrics/certs/tls.{crt,key} (cmd/kueue/main.go), and exits without it. The
# host's /etc stays untouched: Kueue runs in its own mount namespace, where /etc is a
# read-only overlay of $KUEUE_DIR/etc on top of the real /etc. As root a plain mount
# namespace; otherwise an unprivileged user namespace maps the user to root for the mount.
start_kueue() {
  local p d ns=(--mount)
  for p in "$KUEUE_METRICS_PORT" "$KUEUE_WEBHOOK_PORT"; do
    ! port_busy "$p" || die "kueue: port 127.0.0.1:$p is already in use: $(ss -Hltnp "sport = :$p" | head -1)"
  done
  for d in "$KUEUE_DIR/certs" "$KUEUE_DIR/etc/kueue/metrics/certs"; do
    mkdir -p "$d"
    cp "$PKI_DIR/kueue-serving.crt" "$d/tls.crt"
    cp "$PKI_DIR/kueue-serving.key" "$d/tls.key"
  done
  kueue_config
  (( EUID == 0 )) || ns=(--user --map-root-user --mount)
  # shellcheck disable=SC2016  # $1, $@: the inner shell's arguments
  start_bg kueue unshare "${ns[@]}" -- /bin/sh -c \
    'mount -t overlay overlay -o "ro,lowerdir=$1:/etc" /etc && shift && exec "$@"' kueue-etc \
    "$KUEUE_DIR/etc" \
    "$BIN_DIR/kueue" --config="$KUEUE_DIR/config.yaml" --kubeconfig="$KC_DIR/kueue.kubeconfig"
}

# --- Prometheus: managed by Prometheus Operator on the real node, else static -----------
if want_real_node; then
  COMPONENTS=("${COMPONENTS[@]/#prometheus}")   # a pod, not a process of this script
  # shellcheck source-path=SCRIPTDIR source=prometheus_operator.sh
  source "$CLUSTER_SRC/prometheus_operator.sh"
  HOST_SERVICES=(etcd alertmanager dcgm-exporter s3 registry)
else
  HOST_SERVICES=(etcd prometheus alertmanager dcgm-exporter s3 registry)
fi

# --- kube-state-metrics: the independent ledger ----------------------------------------
COMPONENTS+=(kube-state-metrics)
# Its own identity (CN=kube-state-metrics), allowed to list and watch pods and nothing
# else: the only resource it is asked for. Only the families the ledger rule reads (and
# kube_pod_info) are exported, so that a scrape every second stays cheap with many pods.
start_kube_state_metrics() {
  local kc="$KC_DIR/kube-state-metrics.kubeconfig"
  [[ -f $PKI_DIR/kube-state-metrics.crt ]] ||
    issue ca kube-state-metrics "/CN=kube-state-metrics" clientAuth
  [[ -f $kc ]] || write_kubeconfig "$kc" kube-state-metrics kube-state-metrics
  kubectl apply --server-side --field-manager=trainwarden-e2e-up -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-state-metrics}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-state-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-state-metrics}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: kube-state-metrics}
EOF
  start_bg kube-state-metrics "$BIN_DIR/kube-state-metrics" --kubeconfig="$kc" \
    --host=127.0.0.1 --port="$KSM_PORT" \
    --telemetry-host=127.0.0.1 --telemetry-port="$KSM_TELEMETRY_PORT" \
    --resources=pods \
    --metric-allowlist=kube_pod_container_resource_requests,kube_pod_status_phase,kube_pod_start_time,kube_pod_info
}

# ensure NAME: start NAME unless its process is alive. Prints whether it started it.
ensure() {
  local name=$1 port
  if running "$name"; then
    return 1
  fi
  port=$(port_of "$name")
  if port_busy "$port"; then
    die "$name: port 127.0.0.1:$port is already in use by a process this harness did not start: $(ss -Hltnp "sport = :$port" | head -1)"
  fi
  log "  starting $name (port $port, log $LOG_DIR/$name.log)"
  "start_${name//-/_}"
  return 0
}

nodes_ready() {  # prints the number of Ready nodes managed by kwok
  kubectl get nodes -l type=kwok \
    -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' \
    2>/dev/null | grep -c '^True$' || true
}

write_env() {
  s3_keys
  cat >"$ENV_FILE.tmp" <<EOF
KUBECONFIG=$KUBECONFIG_PATH
PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT
DCGM_EXPORTER_URL=http://127.0.0.1:$EXPORTER_PORT
S3_ENDPOINT=http://127.0.0.1:$S3_PORT
S3_ACCESS_KEY=$S3_ACCESS_KEY
S3_SECRET_KEY=$S3_SECRET_KEY
KUBE_APISERVER_URL=$API_URL
KUBECTL=$BIN_DIR/kubectl
KUBE_STATE_METRICS_URL=http://127.0.0.1:$KSM_PORT
KUEUE_VERSION=$KUEUE_VERSION
KUEUE_NAMESPACE_LABEL=$KUEUE_NAMESPACE_LABEL
KUEUE_WEBHOOK_URL=https://127.0.0.1:$KUEUE_WEBHOOK_PORT
WEBHOOK_CLIENT_CA=$PKI_DIR/webhook-client-ca.crt
REGISTRY=127.0.0.1:$REGISTRY_PORT
REGISTRY_CA=$PKI_DIR/ca.crt
ALERTMANAGER_URL=http://127.0.0.1:$ALERTMANAGER_PORT
ALERT_RECEIVER_PORT=$ALERT_RECEIVER_PORT
EOF
  if want_real_node && [[ -f $CLUSTER_DIR/images/images.env ]]; then
    {
      echo "REAL_NODE=$REAL_NODE_NAME"
      # Prometheus is the operator-managed one (prometheus_operator.sh): rules are PrometheusRules.
      echo "PROMETHEUS_OPERATOR_NAMESPACE=$MONITORING_NS"
      grep '^TRAINWARDEN_IMAGE=' "$CLUSTER_DIR/images/images.env"
    } >>"$ENV_FILE.tmp"
  fi
  mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# ======================================================================================
t_all=$(now_ms)

# Flags an API server started by an older harness lacks (printed, one a line): it is
# restarted with the current ones below, so the fast path must not take it as up.
apiserver_missing() {
  local pid flag
  pid=$(pid_of kube-apiserver) || return 0
  for flag in --kubelet-client-certificate= --admission-control-config-file=; do
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$flag" || echo "$flag"
  done
}

# Fast path: everything alive and healthy with current flags, nodes Ready.
all_up=true
[[ -z $(apiserver_missing) && -f $PKI_DIR/apiserver-webhook-client.crt ]] || all_up=false
for c in "${COMPONENTS[@]}"; do
  [[ -n $c ]] || continue
  if ! running "$c" || ! healthy "$c"; then all_up=false; break; fi
done
healthy prometheus || all_up=false
if $all_up && [[ -f $KUBECONFIG_PATH && $(nodes_ready) -ge $EXPECTED_NODES ]] &&
   { ! want_real_node || real_node_ok; }; then
  write_env
  log "cluster already up and healthy ($EXPECTED_NODES kwok nodes$(want_real_node && echo " + $REAL_NODE_NAME") Ready) — nothing to do ($(fmt_ms "$t_all"))"
  log "use: set -a; . $ENV_FILE; set +a"
  exit 0
fi

phase build
"$CLUSTER_SRC/build.sh" | sed 's/^/  /'
phase_end

phase pki
mkdir -p "$STATE_DIR" "$PID_DIR" "$LOG_DIR"
if [[ -f $PKI_DIR/.complete ]]; then
  phase_end "reused"
else
  gen_pki
  phase_end "generated"
fi
# PKI made before the real node existed: add the API server's kubelet client cert.
[[ -f $PKI_DIR/apiserver-kubelet-client.crt ]] || issue_kubelet_client
# PKI made before webhooks were called with a client certificate: add it.
[[ -f $PKI_DIR/apiserver-webhook-client.crt ]] || issue_webhook_client
# PKI made before Kueue was part of the harness: add its certs and kubeconfig.
[[ -f $PKI_DIR/kueue-serving.crt ]] || issue_kueue
# PKI made before the registry was part of the harness: add its serving cert.
[[ -f $PKI_DIR/registry-serving.crt ]] || issue_registry
[[ -f $KC_DIR/kueue.kubeconfig ]] || write_kubeconfig "$KC_DIR/kueue.kubeconfig" kueue-controller-manager kueue
if [[ ! -f $KUBECONFIG_PATH || $PKI_DIR/.complete -nt $KUBECONFIG_PATH ]] ||
   ! cmp -s <(base64 -w0 "$PKI_DIR/ca.crt") <(sed -n 's/^ *certificate-authority-data: //p' "$KUBECONFIG_PATH" | tr -d '\n'); then
  write_kubeconfig "$KUBECONFIG_PATH" trainwarden-admin admin
  write_kubeconfig "$KC_DIR/kube-controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
  write_kubeconfig "$KC_DIR/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
  write_kubeconfig "$KC_DIR/kwok.kubeconfig" kwok-controller kwok
  write_kubeconfig "$KC_DIR/kueue.kubeconfig" kueue-controller-manager kueue
  log "  kubeconfigs written (admin: $KUBECONFIG_PATH)"
fi

phase "${HOST_SERVICES[*]}"
# A Prometheus this script started before it was managed (same port): the pod takes over.
if want_real_node && pid=$(pid_of prometheus); then
  log "  stopping the static prometheus($pid): Prometheus Operator manages it now"
  kill -TERM "$pid"
  for (( i = 0; i < 50; i++ )); do alive "$pid" || break; sleep 0.2; done
fi
started=()
for c in "${HOST_SERVICES[@]}"; do
  if ensure "$c"; then started+=("$c"); fi
done
wait_healthy etcd 30
phase_end "${started[*]:-nothing} started"

phase kube-apiserver
# An API server started before the real node existed cannot reach kubelets (no client
# cert), one started before the admission configuration calls webhooks without one:
# restart it once with the current flags.
missing=$(apiserver_missing | tail -1)
if [[ -n $missing ]] && pid=$(pid_of kube-apiserver); then
  log "  restarting kube-apiserver($pid): started without ${missing%=}"
  kill -TERM "$pid"
  for (( i = 0; i < 100; i++ )); do alive "$pid" || break; sleep 0.2; done
  if alive "$pid"; then kill -KILL "$pid"; fi
  for (( i = 0; i < 50; i++ )); do port_busy "$APISERVER_PORT" || break; sleep 0.2; done
fi
if ensure kube-apiserver; then
  wait_healthy kube-apiserver 120
  phase_end "started"
else
  wait_healthy kube-apiserver 120
  phase_end "already running"
fi

phase "controller-manager + scheduler + kwok"
started=()
for c in kube-controller-manager kube-scheduler kwok; do
  if ensure "$c"; then started+=("$c"); fi
done
for c in kube-controller-manager kube-scheduler kwok; do wait_healthy "$c" 60; done
phase_end "${started[*]:-nothing} started"

phase nodes
kubectl apply -f "$NODES_FILE" | sed 's/^/  /'
t=$(now_ms)
until (( $(nodes_ready) >= EXPECTED_NODES )); do
  (( $(now_ms) - t < 60000 )) || {
    kubectl get nodes -o wide >&2 || true
    fail_with_log kwok "nodes not Ready after 60s"
  }
  sleep 0.5
done
phase_end "$EXPECTED_NODES nodes Ready"

phase "default service account"
t=$(now_ms)
until kubectl get serviceaccount default -n default -o name >/dev/null 2>&1; do
  (( $(now_ms) - t < 60000 )) ||
    fail_with_log kube-controller-manager "ServiceAccount default/default not created after 60s"
  sleep 0.5
done
phase_end

phase kube-state-metrics
started=()
if ensure kube-state-metrics; then started+=(kube-state-metrics); fi
wait_healthy kube-state-metrics 60
phase_end "${started[*]:-nothing} started"

phase kueue
kueue_manifests
started=()
if ensure kueue; then started+=(kueue); fi
wait_healthy kueue 60
phase_end "${started[*]:-nothing} started"

phase "prometheus + alertmanager + dcgm-exporter + s3 + registry ready"
wait_healthy dcgm-exporter 20
wait_healthy s3 20
wait_healthy registry 20
want_real_node || wait_healthy prometheus 60
wait_healthy alertmanager 30
phase_end

phase "real node"
if want_real_node; then
  "$NODE_UP" | sed 's/^/  /'
  phase_end "$REAL_NODE_NAME Ready"
else
  phase_end "skipped ($( (( EUID == 0 )) && echo TRAINWARDEN_REAL_NODE=0 || echo 'needs root'))"
fi

if want_real_node; then
  phase "prometheus (Prometheus Operator $PROM_OPERATOR_VERSION)"
  started=()
  if ensure prometheus-operator; then started+=(prometheus-operator); fi
  wait_healthy prometheus-operator 60
  managed_prometheus
  phase_end "${started[*]:-nothing} started"
fi

write_env
log "cluster up in $(fmt_ms "$t_all"): $EXPECTED_NODES kwok nodes$(want_real_node && echo " + real node $REAL_NODE_NAME") Ready, Kubernetes $K8S_VERSION"
log "use: set -a; . $ENV_FILE; set +a   (kubectl: $BIN_DIR/kubectl)"
