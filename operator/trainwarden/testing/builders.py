"""Every builder, in one import: `from trainwarden.testing.builders import JobBuilder`.

Policies are validated through the API's models when built; everything else is a plain
dict in the shape the API server returns (see each module's docstring).
"""

from trainwarden.api.v1alpha1.names import INSTANCE_LABEL
from trainwarden.testing.base import ObjectBuilder, set_path
from trainwarden.testing.cluster import (
    NamespaceBuilder,
    NodeBuilder,
    PersistentVolumeBuilder,
    PodDisruptionBudgetBuilder,
    PVCBuilder,
    SecretBuilder,
    VolumeSnapshotBuilder,
    VolumeSnapshotClassBuilder,
)
from trainwarden.testing.kueue import AdmissionCheckBuilder, WorkloadBuilder
from trainwarden.testing.pods import GPU, PodBuilder
from trainwarden.testing.policies import (
    BudgetBuilder,
    CheckpointPolicyBuilder,
    IdlePolicyBuilder,
    label_selector,
)
from trainwarden.testing.workloads import (
    DeploymentBuilder,
    JobBuilder,
    JobSetBuilder,
    KubeflowJobBuilder,
    PyTorchJobBuilder,
    RayClusterBuilder,
    RayJobBuilder,
    StatefulSetBuilder,
    pod_template,
)

__all__ = [
    "GPU",
    "INSTANCE_LABEL",
    "AdmissionCheckBuilder",
    "BudgetBuilder",
    "CheckpointPolicyBuilder",
    "DeploymentBuilder",
    "IdlePolicyBuilder",
    "JobBuilder",
    "JobSetBuilder",
    "KubeflowJobBuilder",
    "NamespaceBuilder",
    "NodeBuilder",
    "ObjectBuilder",
    "PVCBuilder",
    "PersistentVolumeBuilder",
    "PodBuilder",
    "PodDisruptionBudgetBuilder",
    "PyTorchJobBuilder",
    "RayClusterBuilder",
    "RayJobBuilder",
    "SecretBuilder",
    "StatefulSetBuilder",
    "VolumeSnapshotBuilder",
    "VolumeSnapshotClassBuilder",
    "WorkloadBuilder",
    "label_selector",
    "pod_template",
    "set_path",
]
