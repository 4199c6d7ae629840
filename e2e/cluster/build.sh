#!/usr/bin/env bash
# Build (or reuse) every binary the local control plane needs, into .cluster/bin, and
# unpack promtool from Debian's Prometheus package into .cluster/prometheus. Idempotent: a step is
# skipped when its outputs exist and are newer than their inputs, so a warm run takes
# about a second. Usage: e2e/cluster/build.sh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$BIN_DIR"
take_lock 8 "$CLUSTER_DIR/.build.lock"   # one build at a time (up.sh calls this script too)

# stale TARGET... -- INPUT...: true when a target is missing or older than an input.
stale() {
  local targets=() t i
  while [[ $1 != -- ]]; do targets+=("$1"); shift; done
  shift
  for t in "${targets[@]}"; do
    [[ -x $t ]] || return 0
    for i in "$@"; do [[ $i -nt $t ]] && return 0; done
  done
  return 1
}

# run_step NAME CMD...: run CMD and report its duration.
run_step() {
  local name=$1 t; shift
  t=$(now_ms)
  log "build $name: start"
  "$@"
  log "build $name: done in $(fmt_ms "$t")"
}

# --- Kubernetes components (wrapper module gobuild/k8s pins k8s.io/kubernetes) ---------
K8S_MOD="$CLUSTER_SRC/gobuild/k8s"
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
k8s_targets=()
for c in "${K8S_CMDS[@]}"; do k8s_targets+=("$BIN_DIR/$c"); done
build_k8s() {
  local pkgs=() c
  log "go build ${K8S_CMDS[*]} in $K8S_MOD"
  for c in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  (cd "$K8S_MOD" && go build -trimpath \
    -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
    -o "$BIN_DIR/" "${pkgs[@]}")
  touch "${k8s_targets[@]}"   # go build leaves an up-to-date binary's mtime alone
}
if stale "${k8s_targets[@]}" -- "$K8S_MOD/go.mod" "$K8S_MOD/go.sum" "$K8S_MOD/tools.go"; then
  run_step "kubernetes $K8S_VERSION (cold: ~tens of minutes on 2 cores)" build_k8s
else
  log "build kubernetes $K8S_VERSION: up to date, skipped"
fi

# --- etcd (wrapper module gobuild/etcd pins go.etcd.io/etcd/server/v3) ----------------
ETCD_MOD="$CLUSTER_SRC/gobuild/etcd"
build_etcd() {
  log "go build go.etcd.io/etcd/server/v3 (etcdmain) in $ETCD_MOD"
  (cd "$ETCD_MOD" && go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" .)
  touch "$BIN_DIR/etcd"
}
if stale "$BIN_DIR/etcd" -- "$ETCD_MOD/go.mod" "$ETCD_MOD/go.sum" "$ETCD_MOD/main.go"; then
  run_step "etcd $ETCD_VERSION" build_etcd
else
  log "build etcd $ETCD_VERSION: up to date, skipped"
fi

# --- modules without replace directives: plain `go install pkg@version` ---------------
# go_tool LABEL MODULE PACKAGE VERSION [LDFLAGS]: install PACKAGE@VERSION unless the binary
# in BIN_DIR already records MODULE at VERSION. LDFLAGS are added to "-s -w". The binary is
# named as go install names it: the last path element, a major version suffix (/v2) skipped.
go_tool() {
  local label=$1 module=$2 package=$3 version=$4 ldflags="-s -w${5:+ $5}" bin
  bin=$package
  if [[ $bin =~ /v[0-9]+$ ]]; then bin=${bin%/*}; fi
  bin="$BIN_DIR/${bin##*/}"
  if [[ -x $bin ]] && go version -m "$bin" 2>/dev/null |
      grep -Eq "^[[:space:]]+mod[[:space:]]+${module//./\\.}[[:space:]]+$version([[:space:]]|$)"; then
    log "build $label $version: up to date, skipped"
    return
  fi
  run_step "$label $version" env GOBIN="$BIN_DIR" go install -trimpath -ldflags "$ldflags" "$package@$version"
}
go_tool kwok sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION"
# kube-state-metrics: the independent ledger of pods' requests (e2e/test_ledger_crosscheck).
# -X stamps the version it reports (as its Makefile does).
go_tool kube-state-metrics k8s.io/kube-state-metrics/v2 k8s.io/kube-state-metrics/v2 \
  "$KSM_VERSION" "-X github.com/prometheus/common/version.Version=$KSM_VERSION"
# The S3 server for CheckpointPolicy s3: Versity S3 Gateway (Apache-2.0), posix backend.
go_tool "versitygw (S3 server)" github.com/versity/versitygw \
  github.com/versity/versitygw/cmd/versitygw "$VERSITYGW_VERSION"
# Kueue's controller-manager (AdmissionCheck e2e tests). Its go.mod has no replace
# directives; -X stamps the version its log and user agent report (as its Makefile does).
go_tool kueue sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION" \
  "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
# Alertmanager, which the harness Prometheus sends the chart's alerts to (e2e/test_alerting.py).
go_tool alertmanager github.com/prometheus/alertmanager \
  github.com/prometheus/alertmanager/cmd/alertmanager "$ALERTMANAGER_VERSION" \
  "-X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v}"

# The OCI registry the release path pushes to and the real node pulls from: the CNCF
# Distribution registry (docs: e2e/cluster/README.md); -X stamps the version it reports.
go_tool "registry (CNCF Distribution)" github.com/distribution/distribution/v3 \
  github.com/distribution/distribution/v3/cmd/registry "$REGISTRY_VERSION" \
  "-X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION"

# --- Prometheus Operator and its config reloader -----------------------------------------
# Its go.mod replaces its own submodules (pkg/apis/monitoring, pkg/client) with directories
# the module's zip does not carry, so `go install pkg@version` refuses it. Built instead from
# a copy of the module with those replace directives dropped: the submodules resolve to
# their published copies at the same version. The CRDs come from the same module.
prom_operator_stamp="$BIN_DIR/.prometheus-operator.version"
build_prometheus_operator() {
  local src tmp module=github.com/prometheus-operator/prometheus-operator
  src=$(go mod download -json "$module@$PROM_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d $src ]] || die "go mod download $module@$PROM_OPERATOR_VERSION: no module directory"
  tmp=$(mktemp -d)
  cp -r "$src/." "$tmp/"
  chmod -R u+w "$tmp"
  (cd "$tmp" &&
    go mod edit -dropreplace="$module/pkg/apis/monitoring" -dropreplace="$module/pkg/client" &&
    go build -trimpath -o "$tmp/bin/" \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=${PROM_OPERATOR_VERSION#v}" \
      ./cmd/operator ./cmd/prometheus-config-reloader)
  mv "$tmp/bin/operator" "$BIN_DIR/prometheus-operator"
  mv "$tmp/bin/prometheus-config-reloader" "$BIN_DIR/prometheus-config-reloader"
  rm -rf "$PROM_OPERATOR_DIR"
  mkdir -p "$PROM_OPERATOR_DIR"
  cp -r "$tmp/example/prometheus-operator-crd" "$PROM_OPERATOR_DIR/crds"
  cp "$tmp/example/rbac/prometheus-operator/prometheus-operator-cluster-role.yaml" \
    "$tmp/example/rbac/prometheus/prometheus-cluster-role.yaml" "$PROM_OPERATOR_DIR/"
  rm -rf "$tmp"
  echo "$PROM_OPERATOR_VERSION" >"$prom_operator_stamp"
}
if [[ -x $BIN_DIR/prometheus-operator && -x $BIN_DIR/prometheus-config-reloader &&
      -f $PROM_OPERATOR_DIR/prometheus-cluster-role.yaml && $(cat "$prom_operator_stamp" 2>/dev/null) == "$PROM_OPERATOR_VERSION" ]]; then
  log "build prometheus-operator $PROM_OPERATOR_VERSION: up to date, skipped"
else
  run_step "prometheus-operator $PROM_OPERATOR_VERSION (cold: ~7 min on 2 cores)" build_prometheus_operator
fi

# --- Prometheus (github.com/prometheus/prometheus) ---------------------------------------
# Its go.mod has replace and exclude directives, so it too is built from a copy of the
# module. Its plugins/plugins.go (generated from plugins.yml, which upstream documents as the
# place to drop service discoveries a build does not need) is reduced to Kubernetes: the
# only discovery Prometheus Operator generates besides the built-in static and file ones.
# The web UI's assets are not embedded (no npm build): the HTTP API is what the tests use.
prom_stamp="$BIN_DIR/.prometheus.version"
build_prometheus() {
  local src tmp module=github.com/prometheus/prometheus
  src=$(go mod download -json "$module@$PROM_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -d $src ]] || die "go mod download $module@$PROM_VERSION: no module directory"
  tmp=$(mktemp -d)
  cp -r "$src/." "$tmp/"
  chmod -R u+w "$tmp"
  printf '%s\n' '// Package plugins registers the service discoveries of this build: Kubernetes only.' \
    'package plugins' '' 'import _ "github.com/prometheus/prometheus/discovery/kubernetes"' \
    >"$tmp/plugins/plugins.go"
  (cd "$tmp" && go build -trimpath -o "$BIN_DIR/prometheus" \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=2.${PROM_VERSION#v0.}" \
    ./cmd/prometheus)
  rm -rf "$tmp"
  echo "$PROM_VERSION" >"$prom_stamp"
}
if [[ -x $PROM_BIN && $(cat "$prom_stamp" 2>/dev/null) == "$PROM_VERSION" ]]; then
  log "build prometheus $PROM_VERSION: up to date, skipped"
else
  run_step "prometheus $PROM_VERSION (cold: ~5 min on 2 cores)" build_prometheus
fi

# --- promtool from Debian's Prometheus package (extracted only; no service is installed) -------
fetch_prometheus() {
  local tmp
  tmp=$(mktemp -d)
  log "apt-get download prometheus (into $tmp), dpkg-deb -x into $PROM_DIR"
  # apt downloads as the unprivileged _apt user: let it write here (avoids a warning).
  if (( EUID == 0 )) && id -u _apt >/dev/null 2>&1; then chown _apt "$tmp"; fi
  if ! (cd "$tmp" && apt-get download prometheus); then
    log "apt-get download failed; running apt-get update and retrying"
    apt-get update -qq
    (cd "$tmp" && apt-get download prometheus)
  fi
  rm -rf "$PROM_DIR.tmp"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$PROM_DIR.tmp"
  basename "$tmp"/prometheus_*.deb >"$PROM_DIR.tmp/DEB"
  rm -rf "$PROM_DIR" "$tmp"
  mv "$PROM_DIR.tmp" "$PROM_DIR"
}
if [[ -x $PROM_DIR/usr/bin/promtool ]]; then
  log "prometheus (promtool): $(<"$PROM_DIR/DEB") present, skipped"
else
  run_step "prometheus (Debian package)" fetch_prometheus
fi

log "build: all binaries ready in $BIN_DIR ($(( SECONDS - _t0_script ))s)"
