#!/usr/bin/env bash
# Release artifacts: the operator image and the Helm chart, pushed to an OCI registry.
#
#   make release VERSION=x.y.z REGISTRY=host[:port]/path [REGISTRY_CA=ca.pem]
#
# 1. builds the operator image with node/image.sh: the very archive the local cluster's real
#    node runs (Debian's python3.11 + the package at the venv's pinned versions; linux/amd64
#    only: the base is the host's own .debs, and image.sh checks it by running its python);
# 2. pushes it as REGISTRY/trainwarden:VERSION with crane (go-containerregistry, built from
#    its Go module into .cluster/bin): the manifest goes up byte for byte, so its digest is
#    the one the real node's image already has;
# 3. packages the chart (`helm package`, version and appVersion VERSION) with its default
#    image pinned by that digest (image.repository REGISTRY/trainwarden, image.digest), and
#    checks that the packaged chart renders exactly that image;
# 4. pushes the chart with `helm push` to oci://REGISTRY/charts (REGISTRY/charts/trainwarden);
# 5. prints both references with their digests and sizes. The files stay in dist/VERSION/.
#
# REGISTRY_CA: the CA that signed the registry's certificate, if not a system one. No
# credentials are handled here: `helm registry login` and crane read the Docker config
# (~/.docker/config.json) as usual. It never tags git: the release procedure does
# (docs/install.md, "Releasing").
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CRANE_VERSION="v0.22.1"   # github.com/google/go-containerregistry
CRANE="$BIN_DIR/crane"
HELM="$BIN_DIR/helm"

VERSION=${1:-} REGISTRY=${2:-}
REGISTRY=${REGISTRY%/}
# SemVer 2 (Helm requires it of chart versions): x.y.z with an optional pre-release.
[[ $VERSION =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must be x.y.z (SemVer), got '${VERSION}': make release VERSION=0.2.0 REGISTRY=host/path"
[[ $REGISTRY =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]] ||
  die "REGISTRY must be host[:port][/path], got '${REGISTRY}'"
CA_ARGS=()
if [[ -n ${REGISTRY_CA:-} ]]; then
  [[ -r $REGISTRY_CA ]] || die "REGISTRY_CA $REGISTRY_CA is not readable"
  CA_ARGS=(--ca-file "$REGISTRY_CA")
  export SSL_CERT_FILE="$REGISTRY_CA"   # crane (Go's TLS) trusts exactly this CA
fi
IMAGE_REPO="$REGISTRY/trainwarden"
CHART_REPO="oci://$REGISTRY/charts"
OUT="$REPO_ROOT/dist/$VERSION"

crane_current() {
  [[ -x $CRANE ]] && go version -m "$CRANE" 2>/dev/null |
    grep -Eq "^[[:space:]]+mod[[:space:]]+github\.com/google/go-containerregistry[[:space:]]+$CRANE_VERSION([[:space:]]|$)"
}
if ! crane_current; then
  t=$(now_ms)
  GOBIN="$BIN_DIR" go install -trimpath -ldflags "-s -w" \
    "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
  log "crane $CRANE_VERSION: built in $(fmt_ms "$t")"
fi
"$CLUSTER_SRC/helm.sh" >/dev/null

if [[ -n $(git -C "$REPO_ROOT" status --porcelain --untracked-files=no) ]]; then
  warn "the working tree has uncommitted changes: they are in this release's image and chart"
fi
rm -rf "$OUT"
mkdir -p "$OUT"
work=$(mktemp -d "$OUT/.work-XXXX")
trap 'rm -rf "$work"' EXIT

# --- the image ---------------------------------------------------------------------------
"$CLUSTER_SRC/node/image.sh"
# shellcheck disable=SC1091  # written by image.sh
source "$CLUSTER_DIR/images/images.env"
mkdir -p "$work/layout"
tar -xf "$TRAINWARDEN_ARCHIVE" -C "$work/layout"
t=$(now_ms)
pushed=$("$CRANE" push "$work/layout" "$IMAGE_REPO:$VERSION")
IMAGE_DIGEST=${pushed##*@}
[[ $IMAGE_DIGEST =~ ^sha256:[0-9a-f]{64}$ ]] || die "crane push printed no digest: $pushed"
local_digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$work/layout/index.json")
[[ $IMAGE_DIGEST == "$local_digest" ]] ||
  die "the registry holds $IMAGE_DIGEST, the archive's manifest is $local_digest"
log "pushed $IMAGE_REPO:$VERSION ($IMAGE_DIGEST) in $(fmt_ms "$t")"
IMAGE_SIZE=$(du -b "$TRAINWARDEN_ARCHIVE" | cut -f1)

# --- the chart ---------------------------------------------------------------------------
# set_line FILE OLD_REGEX NEW: replace the one line matching OLD_REGEX, or fail.
set_line() {
  local file=$1 old=$2 new=$3
  (( $(grep -c -E "$old" "$file") == 1 )) || die "$file: expected one line matching '$old'"
  python3 - "$file" "$old" "$new" <<'EOF'
import re, sys
path, old, new = sys.argv[1:]
with open(path) as f:
    text = f.read()
with open(path, "w") as f:
    f.write(re.sub(old, lambda _: new, text, count=1, flags=re.M))
EOF
}
cp -a "$REPO_ROOT/helm/trainwarden" "$work/trainwarden"
values="$work/trainwarden/values.yaml"
set_line "$values" '^  repository: .*$' "  repository: $IMAGE_REPO"
set_line "$values" '^  digest: .*$' "  digest: \"$IMAGE_DIGEST\""
# Artifact Hub's list of the chart's images: the one it runs (e2e/test_chart.py checks they agree).
set_line "$work/trainwarden/Chart.yaml" '^      image: .*$' "      image: $IMAGE_REPO@$IMAGE_DIGEST"
"$HELM" package "$work/trainwarden" --version "$VERSION" --app-version "$VERSION" -d "$OUT" >/dev/null
CHART_TGZ="$OUT/trainwarden-$VERSION.tgz"
rendered=$("$HELM" template trainwarden "$CHART_TGZ" --kube-version "$K8S_VERSION" --show-only templates/deployment.yaml |
  sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p')
[[ $rendered == "$IMAGE_REPO@$IMAGE_DIGEST" ]] ||
  die "the packaged chart runs '$rendered', not $IMAGE_REPO@$IMAGE_DIGEST"
t=$(now_ms)
pushed=$("$HELM" push "$CHART_TGZ" "$CHART_REPO" "${CA_ARGS[@]}" 2>&1)
CHART_DIGEST=$(sed -n 's/^Digest: //p' <<<"$pushed")
[[ $CHART_DIGEST =~ ^sha256:[0-9a-f]{64}$ ]] || die "helm push printed no digest: $pushed"
log "pushed $CHART_REPO/trainwarden:$VERSION ($CHART_DIGEST) in $(fmt_ms "$t")"

# --- what was released --------------------------------------------------------------------
cat >"$OUT/release.env" <<EOF
VERSION=$VERSION
IMAGE=$IMAGE_REPO:$VERSION
IMAGE_DIGEST=$IMAGE_DIGEST
IMAGE_SIZE=$IMAGE_SIZE
CHART=$CHART_REPO/trainwarden
CHART_DIGEST=$CHART_DIGEST
CHART_SIZE=$(du -b "$CHART_TGZ" | cut -f1)
EOF
printf '\nrelease %s\n' "$VERSION"
printf '  image  %s@%s  (%s bytes: the OCI archive)\n' "$IMAGE_REPO:$VERSION" "$IMAGE_DIGEST" "$IMAGE_SIZE"
printf '  chart  %s/trainwarden:%s@%s  (%s bytes)\n' "$CHART_REPO" "$VERSION" "$CHART_DIGEST" "$(du -b "$CHART_TGZ" | cut -f1)"
printf '  install: helm install trainwarden %s/trainwarden --version %s\n' "$CHART_REPO" "$VERSION"
