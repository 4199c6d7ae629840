# The trainwarden image for users who build with Docker (or Podman, Buildah):
#   docker build -t trainwarden:dev .
#   docker run --rm trainwarden:dev demo-trainer --output-dir /data/checkpoints --max-steps 20
# The local cluster does not use Docker: e2e/cluster/node/image.sh builds the equivalent
# image (Debian bookworm's python3.11 + this package, same entrypoint) as an OCI archive
# without a registry or a daemon, and imports it into the real node's containerd.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN pip install . && rm -rf /src

WORKDIR /data
ENTRYPOINT ["trainwarden"]
CMD ["--help"]
