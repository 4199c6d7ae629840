# shellcheck shell=bash
# Prometheus Operator managing the harness's Prometheus (sourced by up.sh; needs the real
# node, which runs the Prometheus pod). Without the real node up.sh starts Prometheus from
# the static configuration in start_prometheus instead.
#
# What runs where:
#   prometheus-operator   a host process (like kueue), its own identity (CN=prometheus-
#                         operator) bound to the ClusterRole its module ships.
#   Prometheus "e2e"      in namespace monitoring, a StatefulSet pod the operator makes, on
#                         the real node with the host network (no kube-proxy, no cluster
#                         DNS here: every target and the API server are on the host), from
#                         the image of the Prometheus build.sh makes (node/image.sh), on
#                         127.0.0.1:$PROMETHEUS_PORT as the static one does.
#   scrape targets        the dcgm-exporter stand-in as GPU Operator has it scraped: its
#                         ServiceMonitor (dcgm_objects); the chart's operator on the real
#                         node: the chart's ServiceMonitor. Outside the cluster (the stand-in
#                         with honorLabels, kube-state-metrics, Prometheus itself, operators
#                         the tests start): one ScrapeConfig each, with the job names and
#                         labels of the static configuration. Rules: PrometheusRule objects
#                         (e2e/monitoring.py).
#   alerts                the harness's Alertmanager on the host, through
#                         additionalAlertManagerConfigs (the operator's way to name an
#                         Alertmanager it does not manage).
#
# Host networking and a port other than 9090 take four overrides, each the operator's own
# mechanism: web.listen-address in additionalArgs (the operator sets it only with
# listenLocal), the probes' host and port and the API server's address (kubelet's
# KUBERNETES_SERVICE_* name a ClusterIP nothing routes here) through spec.containers (a
# strategic merge into the containers it generates), and the reloaders' listen and reload
# addresses through spec.containers/spec.initContainers args.

COMPONENTS+=(prometheus-operator)
MONITORING_NS=monitoring
PROMETHEUS_NAME=e2e
RULES_DIR=/etc/prometheus/rules/prometheus-$PROMETHEUS_NAME-rulefiles-0

start_prometheus_operator() {
  [[ -f $PKI_DIR/prometheus-operator.crt ]] ||
    issue ca prometheus-operator "/CN=prometheus-operator" clientAuth
  kubectl apply --server-side --field-manager=trainwarden-e2e-up -f "$PROM_OPERATOR_DIR/crds" >/dev/null
  # The operator asks discovery once, at start, which kinds exist: one it misses (a CRD not
  # yet served) it never watches ("resource scrapeconfigs not installed in the cluster").
  kubectl wait --for condition=established --timeout=60s -f "$PROM_OPERATOR_DIR/crds" >/dev/null
  kubectl apply --server-side --field-manager=trainwarden-e2e-up \
    -f "$PROM_OPERATOR_DIR/prometheus-operator-cluster-role.yaml" >/dev/null
  kubectl apply --server-side --field-manager=trainwarden-e2e-up -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: prometheus-operator}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: prometheus-operator}
EOF
  # shellcheck source=/dev/null
  source "$CLUSTER_DIR/images/images.env"
  start_bg prometheus-operator "$BIN_DIR/prometheus-operator" \
    --apiserver="$API_URL" --ca-file="$PKI_DIR/ca.crt" \
    --cert-file="$PKI_DIR/prometheus-operator.crt" --key-file="$PKI_DIR/prometheus-operator.key" \
    --web.listen-address="127.0.0.1:$PROM_OPERATOR_PORT" \
    --prometheus-instance-namespaces="$MONITORING_NS" \
    --alertmanager-instance-namespaces="$MONITORING_NS" \
    --thanos-ruler-instance-namespaces="$MONITORING_NS" \
    --prometheus-config-reloader="$RELOADER_IMAGE"
}

# scrape_config NAME JOB SPEC-YAML: a ScrapeConfig in the monitoring namespace.
scrape_config() {
  cat <<EOF
---
apiVersion: monitoring.coreos.com/v1alpha1
kind: ScrapeConfig
metadata: {name: $1, namespace: $MONITORING_NS}
spec:
  jobName: $2
$3
EOF
}

# The objects Prometheus "e2e" is made of, as one YAML stream.
prometheus_objects() {
  local probe="httpGet: {host: 127.0.0.1, port: $PROMETHEUS_PORT}"
  local reload="--config-file=/etc/prometheus/config/prometheus.yaml.gz, --config-envsubst-file=/etc/prometheus/config_out/prometheus.env.yaml, --watched-dir=$RULES_DIR"
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $MONITORING_NS}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: prometheus, namespace: $MONITORING_NS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-e2e}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: prometheus}
subjects:
- {kind: ServiceAccount, name: prometheus, namespace: $MONITORING_NS}
---
apiVersion: v1
kind: Secret
metadata: {name: alertmanagers, namespace: $MONITORING_NS}
stringData:
  alertmanagers.yaml: |
    - static_configs:
      - targets: ['127.0.0.1:$ALERTMANAGER_PORT']
---
apiVersion: monitoring.coreos.com/v1
kind: Prometheus
metadata: {name: $PROMETHEUS_NAME, namespace: $MONITORING_NS}
spec:
  version: v2.55.1                 # the binary in the image (build.sh, PROM_VERSION)
  image: $PROMETHEUS_IMAGE
  imagePullPolicy: Never           # imported into the node's containerd, no registry
  replicas: 1
  serviceAccountName: prometheus
  hostNetwork: true
  serviceDiscoveryRole: EndpointSlice   # the dcgm stand-in's slice has no Endpoints twin
  nodeSelector: {trainwarden.dev/real-node: "true"}
  tolerations: [{key: trainwarden.dev/real-node, operator: Exists, effect: NoSchedule}]
  scrapeInterval: 5s
  scrapeTimeout: 4s
  evaluationInterval: 5s
  retention: 7d
  enableAdminAPI: true
  # Every ServiceMonitor, PodMonitor, PrometheusRule and ScrapeConfig in the cluster.
  serviceMonitorSelector: {}
  serviceMonitorNamespaceSelector: {}
  podMonitorSelector: {}
  podMonitorNamespaceSelector: {}
  ruleSelector: {}
  ruleNamespaceSelector: {}
  scrapeConfigSelector: {}
  scrapeConfigNamespaceSelector: {}
  additionalArgs:
  - {name: web.listen-address, value: "127.0.0.1:$PROMETHEUS_PORT"}
  additionalAlertManagerConfigs: {name: alertmanagers, key: alertmanagers.yaml}
  # The file_sd targets operators the tests start write (e2e/monitoring.py).
  volumes:
  - {name: targets, hostPath: {path: "$STATE_DIR/prometheus/targets", type: Directory}}
  volumeMounts:
  - {name: targets, mountPath: /etc/prometheus/targets, readOnly: true}
  containers:
  - name: prometheus
    env:
    - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
    - {name: KUBERNETES_SERVICE_PORT, value: "$APISERVER_PORT"}
    startupProbe: {$probe}
    readinessProbe: {$probe}
    livenessProbe: {$probe}
  - name: config-reloader
    args: [--listen-address=127.0.0.1:$RELOADER_PORT, --reload-url=http://127.0.0.1:$PROMETHEUS_PORT/-/reload, $reload]
  initContainers:
  - name: init-config-reloader
    args: [--watch-interval=0, --listen-address=127.0.0.1:$INIT_RELOADER_PORT, $reload]
EOF
  # The static configuration's jobs, as ScrapeConfigs (see start_prometheus for each one's why).
  scrape_config dcgm-exporter dcgm-exporter "  honorLabels: true
  staticConfigs: [{targets: ['127.0.0.1:$EXPORTER_PORT']}]"
  scrape_config prometheus prometheus "  staticConfigs: [{targets: ['127.0.0.1:$PROMETHEUS_PORT']}]"
  scrape_config trainwarden-metrics trainwarden-metrics "  fileSDConfigs: [{files: ['/etc/prometheus/targets/*.json'], refreshInterval: 5s}]"
  scrape_config kube-state-metrics kube-state-metrics "  scrapeInterval: 1s
  scrapeTimeout: 1s
  honorLabels: true
  staticConfigs:
  - targets: ['127.0.0.1:$KSM_PORT']
    labels: {namespace: monitoring, pod: kube-state-metrics-0, container: kube-state-metrics, service: kube-state-metrics, endpoint: http}"
}

# dcgm_objects NODE_IP: the dcgm-exporter stand-in as GPU Operator deploys dcgm-exporter and
# has it scraped: Service nvidia-dcgm-exporter (port gpu-metrics) in gpu-operator and its
# ServiceMonitor (honorLabels false, the default), discovered through an EndpointSlice. The
# exporter is a process on the host, not GPU Operator's DaemonSet pod: the slice names the
# host by the real node's address (a slice may not name loopback) and points, by targetRef,
# at a Pod object on a kwok node standing for the DaemonSet's pod. Prometheus then labels
# the target as it labels the real one (namespace gpu-operator, pod, container, service,
# endpoint), and the exporter's own namespace/pod/container labels, which name the GPU's
# consumer, arrive as exported_namespace/exported_pod/exported_container.
dcgm_objects() {
  cat <<EOF
---
apiVersion: v1
kind: Namespace
metadata: {name: gpu-operator}
---
apiVersion: v1
kind: Pod
metadata:
  name: nvidia-dcgm-exporter-sim
  namespace: gpu-operator
  labels: {app: nvidia-dcgm-exporter}
spec:
  nodeName: cpu-0                  # a kwok node: the object is real, kwok runs nothing
  containers:
  - name: nvidia-dcgm-exporter
    image: nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04
    ports: [{name: gpu-metrics, containerPort: $EXPORTER_PORT}]
---
apiVersion: v1
kind: Service
metadata:
  name: nvidia-dcgm-exporter
  namespace: gpu-operator
  labels: {app: nvidia-dcgm-exporter}
spec:
  ports: [{name: gpu-metrics, port: 9400, targetPort: $EXPORTER_PORT}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: nvidia-dcgm-exporter-host
  namespace: gpu-operator
  labels:
    kubernetes.io/service-name: nvidia-dcgm-exporter
    endpointslice.kubernetes.io/managed-by: trainwarden-e2e-up
addressType: IPv4
ports: [{name: gpu-metrics, port: $EXPORTER_PORT, protocol: TCP}]
endpoints:
- addresses: ["$1"]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: gpu-operator, name: nvidia-dcgm-exporter-sim}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: nvidia-dcgm-exporter
  namespace: gpu-operator
  labels: {app: nvidia-dcgm-exporter}
spec:
  selector: {matchLabels: {app: nvidia-dcgm-exporter}}
  namespaceSelector: {matchNames: [gpu-operator]}
  endpoints:
  - port: gpu-metrics
    path: /metrics
    honorLabels: false
    params: {view: [serviceMonitor]}   # the stand-in's pods PUT for this convention
EOF
}

# managed_prometheus: apply the objects, then wait until the operator's pod serves.
managed_prometheus() {
  # shellcheck source=/dev/null
  source "$CLUSTER_DIR/images/images.env"
  kubectl apply --server-side --field-manager=trainwarden-e2e-up \
    -f "$PROM_OPERATOR_DIR/prometheus-cluster-role.yaml" >/dev/null
  mkdir -p "$STATE_DIR/prometheus/targets"
  local node_ip
  node_ip=$(kubectl get node "$REAL_NODE_NAME" \
    -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')
  [[ -n $node_ip ]] || die "node $REAL_NODE_NAME reports no InternalIP"
  { prometheus_objects; dcgm_objects "$node_ip"; } |
    kubectl apply --server-side --field-manager=trainwarden-e2e-up -f - | sed 's/^/  /'
  local t
  t=$(now_ms)
  until http_ok "http://127.0.0.1:$PROMETHEUS_PORT/-/ready"; do
    (( $(now_ms) - t < 180000 )) || {
      kubectl -n "$MONITORING_NS" get prometheus,statefulset,pods -o wide >&2 || true
      kubectl -n "$MONITORING_NS" describe pods >&2 || true
      fail_with_log prometheus-operator "Prometheus $MONITORING_NS/$PROMETHEUS_NAME not ready after 180s"
    }
    sleep 1
  done
  log "  Prometheus $MONITORING_NS/$PROMETHEUS_NAME ready after $(fmt_ms "$t")"
}
