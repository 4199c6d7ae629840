"""Scene: once the real trainer finished, its CheckpointPolicy prunes the run down to the
final and the best checkpoints (a pruner Job on the real node, with no API token), and says
so in its status, in Events on the PVC and in an annotation on it."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
from demo.shell import get, say, show
from harness import wait_for
from trainwarden.testing.builders import CheckpointPolicyBuilder

POLICY = "llm-real-checkpoints"


@dataclass(frozen=True)
class Finished:
    """A finished training run: where its checkpoints are, and its final trainer state."""

    namespace: str
    checkpoints: Path
    max_steps: int
    final: dict[str, Any]

    @property
    def best(self) -> int:
        """The step of the trainer's own best_model_checkpoint."""
        return int(Path(self.final["best_model_checkpoint"]).name.split("-")[1])


def policy(namespace: str) -> CheckpointPolicyBuilder:
    """Keep the newest 2 and the best by eval_loss while the job runs; once it finished,
    the final and the best. Demo scale: every 15 s, checkpoints older than 5 s."""
    return (
        CheckpointPolicyBuilder(POLICY)
        .enforce()
        .namespaces(namespace)
        .pvc()
        .layout("HuggingFace")
        .keep_last(2)
        .keep_best("eval_loss", order="Min")
        .min_age("5s")
        .after_completion(keep_last=1, keep_best="eval_loss", order="Min", delay="1s")
        .every("15s")
    )


def run(finished: Finished) -> None:
    say("The CheckpointPolicy prunes the finished run down to its final and best checkpoints")
    wanted = {finished.max_steps, finished.best}

    def pruned() -> dict[str, Any] | None:
        status = get("cpp", POLICY).get("status")
        where = ((status or {}).get("locations") or [{}])[0]
        # The report of the run that left exactly the final and the best: recorded.
        done = where.get("jobState") == "Finished" and where.get("kept") == len(wanted)
        return (
            status
            if done and set(harness.checkpoint_steps(finished.checkpoints)) == wanted
            else None
        )

    status = wait_for(pruned, timeout=120, what="the pruner to apply afterCompletion")
    where = status["locations"][0]
    print(
        f"on disk now: {harness.checkpoint_steps(finished.checkpoints)} (the final, "
        f"checkpoint-{finished.max_steps}, and the trainer's own best_model_checkpoint, "
        f"checkpoint-{finished.best}); freed {status['bytesFreed']} bytes in all, last run by "
        f"pruner Job {where['lastJob']}"
    )
    show("get", "cpp", POLICY)
    events = get(
        "events", "-n", finished.namespace, "--field-selector",
        "involvedObject.name=checkpoints,reason=CheckpointsPruned",
    )["items"]  # fmt: skip
    for event in events[-2:]:
        print(
            f"Event {event['reason']} on PVC {finished.namespace}/checkpoints: {event['message']}"
        )
    annotations = get("pvc", "-n", finished.namespace, "checkpoints")["metadata"].get(
        "annotations", {}
    )
    print(
        f"PVC annotation trainwarden.dev/pruned-by: {annotations.get('trainwarden.dev/pruned-by')}"
    )
