#!/usr/bin/env bash
# Installs the Helm CLI into .cluster/bin/helm from its Go module (the registry package
# helm.sh/helm/v3), the same way build.sh installs kwok. Idempotent: skipped when the binary
# already records the pinned module version, so a warm run takes well under a second.
# Cold on 2 cores: about 3 minutes (the module cache is shared with the cluster build).
set -euo pipefail
# shellcheck source=e2e/cluster/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

HELM_VERSION="v3.21.4"
HELM="$BIN_DIR/helm"

helm_current() {
  [[ -x $HELM ]] &&
    go version -m "$HELM" 2>/dev/null |
    grep -Eq "^[[:space:]]+mod[[:space:]]+helm\.sh/helm/v3[[:space:]]+$HELM_VERSION([[:space:]]|$)"
}

if helm_current; then
  log "helm $HELM_VERSION: up to date, skipped"
  exit 0
fi
mkdir -p "$BIN_DIR"
start=$(now_ms)
log "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
# The version Helm prints comes from its own ldflags variable, not from the module.
GOBIN="$BIN_DIR" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
helm_current || die "helm was built but does not record $HELM_VERSION"
log "helm $HELM_VERSION: built in $(fmt_ms "$start")"
