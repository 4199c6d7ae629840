"""The manifest Helm rendered for a release, from its release Secrets (plain data).

A release record is written by whoever can write Secrets in the release's namespace:
anything in it that is not what Helm writes is an Unreadable naming what, never a
traceback (the doctor then checks the live roles, and says it could not verify them)."""

import base64
import binascii
import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

JSON = dict[str, Any]
MAX_RECORD = 32 * 2**20
"""The most a release record inflates to (a chart's manifest is far smaller): a small
gzip of zeros must not take the admin's memory."""


class Unreadable(ValueError):
    """A release record that is not what Helm writes."""


def revision(secret: Mapping[str, Any]) -> int:
    """The record's `version` label (Helm's revision number)."""
    meta = secret.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    label = labels.get("version") if isinstance(labels, Mapping) else None
    if not isinstance(label, str) or not (label.isascii() and label.isdigit()):
        raise Unreadable(f"release Secret {_name(secret)} has version label {label!r}")
    return int(label)


def manifests(secrets: Sequence[Mapping[str, Any]]) -> tuple[list[JSON], int]:
    """The documents of the latest revision's manifest, and that revision."""
    numbered = [(revision(s), s) for s in secrets]
    number, latest = max(numbered, key=lambda pair: pair[0])
    data = latest.get("data")
    packed = data.get("release") if isinstance(data, Mapping) else None
    try:
        if not isinstance(packed, str):
            raise Unreadable("no data.release")
        raw = base64.b64decode(base64.b64decode(packed, validate=True), validate=True)
        text = json.loads(_inflated(raw) if raw[:2] == b"\x1f\x8b" else raw)
        manifest = text.get("manifest") if isinstance(text, Mapping) else None
        if not isinstance(manifest, str):
            raise Unreadable("no manifest in the release")
        docs = [d for d in yaml.safe_load_all(manifest) if isinstance(d, dict)]
    except Unreadable:
        raise
    except (binascii.Error, OSError, EOFError, zlib.error, ValueError, RecursionError) as error:
        why = f"{type(error).__name__}: {error}"
        raise Unreadable(f"release Secret {_name(latest)}: {why}") from error
    except yaml.YAMLError as error:
        raise Unreadable(f"release Secret {_name(latest)}: its manifest is not YAML") from error
    return docs, number


def _inflated(raw: bytes) -> bytes:
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    out = inflate.decompress(raw, MAX_RECORD + 1)
    if len(out) > MAX_RECORD:
        raise Unreadable(f"the release record inflates past {MAX_RECORD} bytes")
    return out


def _name(secret: Mapping[str, Any]) -> str:
    meta = secret.get("metadata")
    return str(meta.get("name")) if isinstance(meta, Mapping) else "?"
