"""The VolumeReclaimPolicy builder, validated through the API's pydantic model like the
other policy builders (testing/policies.py)."""

from typing import Self

from trainwarden.api.v1alpha1 import VolumeReclaimPolicy
from trainwarden.testing.base import duration
from trainwarden.testing.policies import Duration, PolicyBuilder


class VolumePolicyBuilder(PolicyBuilder[VolumeReclaimPolicy]):
    """`VolumePolicyBuilder("orphans").namespaces("a").unmounted_for("1m").grace("30s")`"""

    def __init__(self, name: str) -> None:
        super().__init__(VolumeReclaimPolicy, "VolumeReclaimPolicy", name)
        self.unmounted_for("1h")

    def unmounted_for(self, value: Duration) -> Self:
        return self._set("unmountedFor", duration(value))

    def grace(self, value: Duration) -> Self:
        return self._set("gracePeriod", duration(value))

    def snapshot(self, volume_snapshot_class: str, *, timeout: Duration | None = None) -> Self:
        self._set("snapshot.volumeSnapshotClassName", volume_snapshot_class)
        return self._set("snapshot.timeout", duration(timeout))

    def storage_classes(self, *names: str) -> Self:
        return self._set("storageClassNames", list(names))

    def max_keep(self, value: Duration) -> Self:
        return self._set("exemptions.maxKeepDuration", duration(value))

    def caps(self, *, per_minute: int | None = None, gib_per_hour: int | None = None) -> Self:
        self._set("maxActionsPerMinute", per_minute)
        return self._set("maxGiBPerHour", gib_per_hour)
