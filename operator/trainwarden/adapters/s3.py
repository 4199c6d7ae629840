"""An S3-compatible bucket through boto3: the only object-storage I/O of the operator."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from trainwarden.storage.s3_prefix import Object, StoreError

BATCH = 1000
"""Keys per DeleteObjects request (the S3 API's maximum)."""


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str


class Bucket:
    """One bucket; path-style addressing, so any S3-compatible endpoint works."""

    def __init__(self, endpoint: str, region: str, bucket: str, credentials: Credentials) -> None:
        self.name = bucket
        try:
            self._client: Any = boto3.client(
                "s3",
                endpoint_url=endpoint,
                region_name=region,
                aws_access_key_id=credentials.access_key_id,
                aws_secret_access_key=credentials.secret_access_key,
                config=Config(
                    s3={"addressing_style": "path"},
                    retries={"mode": "standard", "max_attempts": 5},
                    connect_timeout=5,
                    read_timeout=30,
                ),
            )
        except (BotoCoreError, ValueError) as error:  # an endpoint or region it refuses
            raise StoreError(_say(error, f"reach s3://{bucket} at {endpoint[:200]}")) from None

    def objects(self, prefix: str) -> Iterator[Object]:
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.name, Prefix=prefix
            )
            for page in pages:
                for item in page.get("Contents") or []:
                    yield Object(
                        key=item["Key"],
                        size=int(item["Size"]),
                        modified=item["LastModified"],
                        etag=str(item.get("ETag") or ""),
                    )
        except (BotoCoreError, ClientError) as error:
            raise StoreError(_say(error, f"list s3://{self.name}/{prefix}")) from None

    def read(self, key: str, limit: int) -> bytes:
        """At most `limit` + 1 bytes (a ranged GET): an object that grew since it was
        listed still costs no more memory than the limit."""
        try:
            answer = self._client.get_object(Bucket=self.name, Key=key, Range=f"bytes=0-{limit}")
            body: bytes = answer["Body"].read(limit + 1)
        except (BotoCoreError, ClientError) as error:
            raise StoreError(_say(error, f"read s3://{self.name}/{key}")) from None
        return body

    def delete(self, keys: list[str]) -> list[str]:
        failed: list[str] = []
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            try:
                answer = self._client.delete_objects(
                    Bucket=self.name,
                    Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True},
                )
            except (BotoCoreError, ClientError) as error:
                failed += [f"{k}: {_say(error, 'delete')}" for k in chunk]
                continue
            failed += [
                f"{e.get('Key')}: {e.get('Code')} {e.get('Message', '')}".strip()
                for e in answer.get("Errors") or []
            ]
        return failed

    def write(self, key: str, body: bytes) -> None:
        try:
            self._client.put_object(
                Bucket=self.name, Key=key, Body=body, ContentType="application/json"
            )
        except (BotoCoreError, ClientError) as error:
            raise StoreError(_say(error, f"write s3://{self.name}/{key}")) from None


def _say(error: Exception, doing: str) -> str:
    if isinstance(error, ClientError):
        detail = error.response.get("Error") or {}
        return f"could not {doing}: {detail.get('Code')} {detail.get('Message') or ''}".strip()
    return f"could not {doing}: {error}"
