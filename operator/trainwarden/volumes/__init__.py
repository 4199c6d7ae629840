"""The volumes slice: VolumeReclaimPolicy, orphaned PersistentVolumeClaims reported, then
(Enforce) snapshotted and deleted. docs/storage.md says the rules."""
