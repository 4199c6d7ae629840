#!/usr/bin/env bash
# Build (or reuse) the real node's container images as OCI archives in .cluster/images,
# and with --import load them into the node's containerd (namespace k8s.io):
#
#   pause        the pod sandbox image: pause.c built with `gcc -static`, one file.
#   trainwarden  Debian bookworm's python3.11 (its .debs and their dependencies, unpacked:
#                no shell, no apt, no dpkg database) + the trainwarden package and its
#                pinned dependencies (the versions in .venv) in dist-packages, and
#                /usr/local/bin/trainwarden as the entrypoint.
#   prometheus   the harness's Prometheus (built by build.sh, static), one file,
#                /bin/prometheus as the entrypoint: the image Prometheus Operator runs
#                (spec.image in e2e/cluster/prometheus_operator.sh).
#   prometheus-config-reloader
#                the operator's reloader sidecar, built by build.sh (static), one file.
#
# Each tag is a hash of that image's inputs, so an archive is rebuilt only when an input
# changes (for trainwarden: operator/**, pyproject.toml, the venv's versions, this
# script, oci_pack.py), and pods name the exact tag (imagePullPolicy: Never). The base
# layer (the .debs) is cached separately and keeps its digest across package rebuilds.
# Writes .cluster/images/images.env (PAUSE_IMAGE=..., TRAINWARDEN_IMAGE=...).
#
# Usage: e2e/cluster/node/image.sh [--import]
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=node-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/node-lib.sh"

IMPORT=false
[[ ${1:-} == --import ]] && IMPORT=true
mkdir -p "$IMAGES_DIR"
take_lock 7 "$IMAGES_DIR/.lock"

PY=python3
VENV_PY="$REPO_ROOT/.venv/bin/python"
[[ -x $VENV_PY ]] || die "no venv at $REPO_ROOT/.venv (run make venv first)"
BASE_PACKAGES=(python3.11)   # apt resolves the rest (libc6, libssl3, libffi8, ...)

hash_of() { sha256sum | cut -c1-12; }
# Work directories are made inside IMAGES_DIR (same file system: the results are renamed
# into place) and removed however the script ends.
tmp_dirs=()
trap 'rm -rf "${tmp_dirs[@]}"' EXIT
new_tmp() { tmp=$(mktemp -d "$IMAGES_DIR/.$1-XXXX"); tmp_dirs+=("$tmp"); }   # sets $tmp

# --- pause -------------------------------------------------------------------------------
pause_tag=$(cat "$NODE_SRC/pause.c" "$NODE_SRC/oci_pack.py" | hash_of)
PAUSE_IMAGE="localhost/trainwarden/pause:$pause_tag"
pause_tar="$IMAGES_DIR/pause-$pause_tag.oci.tar"
if [[ -f $pause_tar ]]; then
  log "image $PAUSE_IMAGE: cached"
else
  t=$(now_ms)
  new_tmp pause
  mkdir -p "$tmp/rootfs"
  gcc -static -Os -s -o "$tmp/rootfs/pause" "$NODE_SRC/pause.c"
  "$PY" "$NODE_SRC/oci_pack.py" --name "$PAUSE_IMAGE" --layer "$tmp/rootfs" \
    --entrypoint /pause --user 65535:65535 -o "$pause_tar" >/dev/null
  log "image $PAUSE_IMAGE: built in $(fmt_ms "$t") ($(du -h "$pause_tar" | cut -f1))"
fi

# --- trainwarden base: python3.11 from Debian's packages -----------------------------------
# The base recipe is this block; its hash names the cached rootfs.
base_tag=$( { printf '%s\n' "${BASE_PACKAGES[@]}"; sed -n '/^# --- trainwarden base/,/^# --- trainwarden app/p' "${BASH_SOURCE[0]}"; } | hash_of)
base_dir="$IMAGES_DIR/base-$base_tag"
build_base() {
  local tmp debs
  new_tmp base
  debs="$tmp/debs"
  mkdir -p "$debs/partial" "$tmp/rootfs"
  chmod 755 "$tmp"
  : >"$tmp/status"   # an empty dpkg status: apt resolves every dependency, none "installed"
  # apt downloads as the unprivileged _apt user: let it write here.
  if id -u _apt >/dev/null 2>&1; then chown -R _apt "$debs"; fi
  local apt=(apt-get -qq -o "Dir::State::status=$tmp/status" -o "Dir::Cache::archives=$debs"
             -o Debug::NoLocking=1 --download-only --no-install-recommends -y install)
  if ! "${apt[@]}" "${BASE_PACKAGES[@]}" >/dev/null; then
    log "apt-get download failed; running apt-get update and retrying"
    apt-get update -qq
    "${apt[@]}" "${BASE_PACKAGES[@]}" >/dev/null
  fi
  local deb
  for deb in "$debs"/*.deb; do
    case ${deb##*/} in dpkg_*|tar_*) continue ;; esac   # pulled in by apt, not needed to run
    dpkg-deb -x "$deb" "$tmp/rootfs"
  done
  for deb in "$debs"/*.deb; do echo "${deb##*/}"; done >"$tmp/PACKAGES"
  local r="$tmp/rootfs"
  rm -rf "$r"/usr/share/{doc,man,info,locale,lintian}
  ln -sf python3.11 "$r/usr/bin/python3"
  mkdir -p "$r/tmp" "$r/root" "$r/data" "$r/etc"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  chroot "$r" /usr/bin/python3.11 -c 'import ssl, sqlite3, ctypes, zlib, lzma, bz2' ||
    die "the base rootfs's python does not start"
  "$PY" "$NODE_SRC/oci_pack.py" --make-layer "$r" -o "$tmp/layer.tar.gz" >/dev/null
  rm -rf "$base_dir"
  mv "$tmp" "$base_dir"
}
if [[ -f $base_dir/layer.tar.gz ]]; then
  log "base rootfs $base_tag: cached ($(wc -l <"$base_dir/PACKAGES") Debian packages)"
else
  t=$(now_ms)
  build_base
  log "base rootfs $base_tag: built in $(fmt_ms "$t") ($(wc -l <"$base_dir/PACKAGES") Debian packages, $(du -sh "$base_dir/rootfs" | cut -f1))"
fi

# --- trainwarden app: the package and its dependencies ----------------------------------------
# Dependencies are pinned to what the venv runs (the tests' versions), the project itself
# is built from the working tree.
constraints=$("$VENV_PY" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v '^-e ')
app_tag=$( {
  echo "$base_tag"; echo "$constraints"
  cat "$NODE_SRC/image.sh" "$NODE_SRC/oci_pack.py" "$REPO_ROOT/pyproject.toml"
  (cd "$REPO_ROOT" && find operator -type f \( -name '*.py' -o -name py.typed \) -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum)
} | hash_of)
TRAINWARDEN_IMAGE="localhost/trainwarden:$app_tag"
app_tar="$IMAGES_DIR/trainwarden-$app_tag.oci.tar"
build_app() {
  local tmp site
  new_tmp app
  site="$tmp/rootfs/usr/local/lib/python3.11/dist-packages"   # on Debian python's sys.path
  mkdir -p "$site" "$tmp/rootfs/usr/local/bin" "$tmp/wheel"
  "$VENV_PY" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$tmp/wheel" "$REPO_ROOT" >/dev/null
  # Only the runtime dependencies, at the venv's versions, as binary wheels for this
  # image's python (CPython 3.11, glibc 2.36): nothing is compiled here.
  grep -Eiv '^(trainwarden)==' <<<"$constraints" >"$tmp/constraints.txt"
  # pip does not expand a manylinux tag to the older ones it implies: list them (glibc 2.36
  # runs wheels built for any glibc down to 2.5).
  local platforms=() y
  for (( y = 36; y >= 5; y-- )); do platforms+=(--platform "manylinux_2_${y}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  "$VENV_PY" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$site" --constraint "$tmp/constraints.txt" \
    --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
    "${platforms[@]}" "$tmp/wheel"/trainwarden-*.whl
  rm -rf "${site:?}/bin"   # console scripts with the host's interpreter path; ours is below
  # Never imported here: kubernetes' asyncio client (68 MB, trainwarden uses the sync one
  # and kopf its own aiohttp client) and test suites shipped inside wheels.
  rm -rf "$site/kubernetes/aio"
  # botocore's models of every AWS service (27 of its 32 MB): trainwarden speaks S3 only.
  find "$site/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name s3 -exec rm -rf {} +
  find "$site" -depth -type d -name tests -exec rm -rf {} +
  # Bytecode that does not depend on file mtimes (the layer's are all 0).
  "$VENV_PY" -m compileall -q -j0 --invalidation-mode unchecked-hash "$site" >/dev/null
  cat >"$tmp/rootfs/usr/local/bin/trainwarden" <<'EOF'
#!/usr/bin/python3.11
import sys

from trainwarden.cli import main

sys.exit(main())
EOF
  chmod 755 "$tmp/rootfs/usr/local/bin/trainwarden"
  "$PY" "$NODE_SRC/oci_pack.py" --name "$TRAINWARDEN_IMAGE" \
    --layer "$base_dir/layer.tar.gz" --layer "$tmp/rootfs" \
    --entrypoint /usr/local/bin/trainwarden --cmd=--help \
    --env PATH=/usr/local/bin:/usr/bin:/bin --env PYTHONUNBUFFERED=1 \
    --label org.opencontainers.image.source=trainwarden --workdir /data \
    -o "$app_tar" >/dev/null
}
if [[ -f $app_tar ]]; then
  log "image $TRAINWARDEN_IMAGE: cached"
else
  t=$(now_ms)
  build_app
  log "image $TRAINWARDEN_IMAGE: built in $(fmt_ms "$t") ($(du -h "$app_tar" | cut -f1))"
fi

# --- Prometheus and the operator's config reloader ---------------------------------------
# binary_image NAME BINARY ENTRYPOINT: an image of one static binary (tag: a hash of it);
# sets $image and $tar.
binary_image() {
  local name=$1 bin=$2 entry=$3 tag
  [[ -x $bin ]] || die "no $bin (run e2e/cluster/build.sh first)"
  tag=$(cat "$NODE_SRC/oci_pack.py" "$bin" | hash_of)
  image="localhost/trainwarden/$name:$tag" tar="$IMAGES_DIR/$name-$tag.oci.tar"
  if [[ -f $tar ]]; then log "image $image: cached"; return; fi
  t=$(now_ms)
  new_tmp "$name"
  mkdir -p "$tmp/rootfs/bin"
  cp "$bin" "$tmp/rootfs$entry"
  "$PY" "$NODE_SRC/oci_pack.py" --name "$image" --layer "$tmp/rootfs" \
    --entrypoint "$entry" --user 65534:65534 -o "$tar" >/dev/null
  log "image $image: built in $(fmt_ms "$t") ($(du -h "$tar" | cut -f1))"
}
binary_image prometheus "$PROM_BIN" /bin/prometheus
PROMETHEUS_IMAGE=$image prometheus_tar=$tar
binary_image prometheus-config-reloader "$BIN_DIR/prometheus-config-reloader" /bin/prometheus-config-reloader
RELOADER_IMAGE=$image reloader_tar=$tar

# Old archives of these images are dead weight: keep only the current ones.
find "$IMAGES_DIR" -maxdepth 1 -name '*.oci.tar' ! -name "${pause_tar##*/}" ! -name "${app_tar##*/}" \
  ! -name "${prometheus_tar##*/}" ! -name "${reloader_tar##*/}" -delete
find "$IMAGES_DIR" -maxdepth 1 -name 'base-*' ! -name "${base_dir##*/}" -exec rm -rf {} +

printf 'PAUSE_IMAGE=%s\nPAUSE_ARCHIVE=%s\nTRAINWARDEN_IMAGE=%s\nTRAINWARDEN_ARCHIVE=%s\n' \
  "$PAUSE_IMAGE" "$pause_tar" "$TRAINWARDEN_IMAGE" "$app_tar" >"$IMAGES_ENV.tmp"
printf 'PROMETHEUS_IMAGE=%s\nPROMETHEUS_ARCHIVE=%s\nRELOADER_IMAGE=%s\nRELOADER_ARCHIVE=%s\n' \
  "$PROMETHEUS_IMAGE" "$prometheus_tar" "$RELOADER_IMAGE" "$reloader_tar" >>"$IMAGES_ENV.tmp"
mv "$IMAGES_ENV.tmp" "$IMAGES_ENV"

# --- import into containerd ------------------------------------------------------------------
if $IMPORT; then import_images; fi
