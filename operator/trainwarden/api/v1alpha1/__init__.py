"""The trainwarden.dev/v1alpha1 API: pydantic models are the single source of truth."""

from trainwarden.api.v1alpha1.budget import TrainingBudget, TrainingBudgetSpec
from trainwarden.api.v1alpha1.checkpoint import CheckpointPolicy, CheckpointPolicySpec
from trainwarden.api.v1alpha1.idle import IdleReclaimPolicy, IdleReclaimPolicySpec
from trainwarden.api.v1alpha1.types import API_VERSION, GROUP, VERSION
from trainwarden.api.v1alpha1.volumes import VolumeReclaimPolicy, VolumeReclaimPolicySpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "VERSION",
    "CheckpointPolicy",
    "CheckpointPolicySpec",
    "IdleReclaimPolicy",
    "IdleReclaimPolicySpec",
    "TrainingBudget",
    "TrainingBudgetSpec",
    "VolumeReclaimPolicy",
    "VolumeReclaimPolicySpec",
]
