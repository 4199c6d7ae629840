#!/usr/bin/env python3
"""Pack root filesystem directories into an OCI image archive, without a registry or Docker.

Each --layer DIR becomes one layer (in order, lowest first). The output is an OCI archive:
a tar of an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/...`), which
`ctr images import` loads and skopeo/umoci read. The index names the image twice: the OCI
`org.opencontainers.image.ref.name` annotation (the tag) and containerd's
`io.containerd.image.name` (the full reference, which `ctr images import` uses as is).

Reproducible: entries are sorted, owned by root, with a fixed mtime, and gzip headers carry
no timestamp, so the same directories give the same digests.

    oci_pack.py --name localhost/pause:1 --layer rootfs/ --entrypoint /pause -o pause.tar

Standard library only (this runs before any venv exists).
"""

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

MTIME = 0  # fixed timestamp for every entry: reproducible digests
CHUNK = 1 << 20


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = MTIME
    return info


def _write_layer_tar(root: Path, out: Path) -> None:
    """Uncompressed tar of everything under root, paths relative to it, sorted."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            here = Path(dirpath)
            for name in [*sorted(filenames), *dirnames]:
                path = here / name
                arcname = str(path.relative_to(root))
                info = _normalise(tar.gettarinfo(str(path), arcname))
                if info.isreg():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:  # directories, symlinks, hard links (gettarinfo tracks inodes)
                    tar.addfile(info)


def _gzip(src: Path, dst: Path) -> None:
    # mtime=0 and no file name in the gzip header: same input, same bytes.
    with (
        src.open("rb") as f,
        dst.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz,
    ):
        shutil.copyfileobj(f, gz, CHUNK)


def make_layer(root: Path, out: Path) -> str:
    """Write root as a gzipped layer to out, and its diff ID to out + ".diffid"."""
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".layer-") as tmp:
        plain = Path(tmp) / "layer.tar"
        _write_layer_tar(root, plain)
        diff_id = f"sha256:{_sha256_file(plain)}"
        _gzip(plain, Path(tmp) / "layer.tar.gz")
        Path(f"{out}.diffid").write_text(diff_id)
        (Path(tmp) / "layer.tar.gz").rename(out)
    return diff_id


def _layer_blob(layer: Path, tmp: Path, blobs: Path) -> tuple[str, str, int]:
    """(diff ID, digest, size) of a layer given as a directory or a make_layer output."""
    if layer.is_dir():
        packed = tmp / "layer.tar.gz"
        diff_id = make_layer(layer, packed)
    else:
        packed = tmp / "layer.tar.gz"
        shutil.copyfile(layer, packed)
        diff_id = Path(f"{layer}.diffid").read_text().strip()
    digest = _sha256_file(packed)
    size = packed.stat().st_size
    packed.rename(blobs / digest)
    return diff_id, f"sha256:{digest}", size


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def pack(args: argparse.Namespace) -> str:
    out = Path(args.output)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".oci-") as tmp:
        layout = Path(tmp) / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layers, diff_ids = [], []
        for layer in args.layer:
            diff_id, digest, size = _layer_blob(Path(layer), Path(tmp), blobs)
            diff_ids.append(diff_id)
            layers.append(
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest,
                    "size": size,
                }
            )
        config: dict[str, object] = {"Env": args.env or []}
        if args.entrypoint:
            config["Entrypoint"] = args.entrypoint
        if args.cmd:
            config["Cmd"] = args.cmd
        if args.workdir:
            config["WorkingDir"] = args.workdir
        if args.user:
            config["User"] = args.user
        if args.label:
            config["Labels"] = dict(item.split("=", 1) for item in args.label)
        image_config = {
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created_by": "e2e/cluster/node/oci_pack.py"} for _ in layers],
        }
        config_digest, config_size = _put_blob(
            blobs, json.dumps(image_config, sort_keys=True).encode()
        )
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_size,
            },
            "layers": layers,
        }
        manifest_digest, manifest_size = _put_blob(
            blobs, json.dumps(manifest, sort_keys=True).encode()
        )
        tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": manifest_size,
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": args.name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                }
            ],
        }
        (layout / "index.json").write_text(json.dumps(index, sort_keys=True))
        (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
        archive = Path(tmp) / "image.tar"
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(layout.rglob("*")):
                info = _normalise(tar.gettarinfo(str(path), str(path.relative_to(layout))))
                if info.isreg():
                    with path.open("rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
        archive.rename(out)
    return manifest_digest


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--make-layer",
        metavar="DIR",
        help="only write DIR as a gzipped layer (and OUTPUT.diffid), to pass as --layer later",
    )
    p.add_argument("--name", help="full image reference, e.g. localhost/x:tag")
    p.add_argument("--layer", action="append", help="a rootfs directory, or a --make-layer output")
    p.add_argument("--entrypoint", action="append", help="one argv element per flag")
    p.add_argument("--cmd", action="append", help="one argv element per flag")
    p.add_argument("--env", action="append", help="KEY=VALUE")
    p.add_argument("--label", action="append", help="KEY=VALUE")
    p.add_argument("--workdir")
    p.add_argument("--user")
    p.add_argument("-o", "--output", required=True, help="archive to write (replaced atomically)")
    args = p.parse_args(argv)
    if args.make_layer:
        sys.stdout.write(make_layer(Path(args.make_layer), Path(args.output)) + "\n")
        return 0
    if not args.name or not args.layer:
        p.error("--name and --layer are required")
    digest = pack(args)
    sys.stdout.write(f"{args.name} {digest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
