"""What a run achieved, from what its trainer wrote beside its checkpoints: one metric's
final value and its best (issue 28 item 4), read from the metrics a scan already parsed
(storage/layouts.py: Hugging Face's trainer_state.json log_history at each checkpoint's
step, Lightning's ModelCheckpoint scores and names, Orbax's metrics). DeepSpeed's layout
records no metric: nothing is said for it.

Pure over the scanned checkpoints; bounded for the status it goes into (a metric name of
at most 128 characters, finite numbers only: storage/metadata.py `finite`).
"""

from collections.abc import Sequence

from trainwarden.api.v1alpha1.checkpoint_status import TrainerResult
from trainwarden.core.retention import Best, Checkpoint, order_key

HF_DEFAULTS = ("eval_loss", "loss")
"""What Hugging Face's Trainer calls best without metric_for_best_model: eval_loss, and
the training loss where nothing was evaluated."""


def _metric(layout: str, found: Sequence[Checkpoint], best: Best | None) -> str | None:
    if best is not None:
        return best.metric
    names = {m for c in found for m in c.metrics}
    if layout == "HuggingFace":
        return next((m for m in HF_DEFAULTS if m in names), None)
    return next(iter(names)) if len(names) == 1 else None


def result(
    layout: str, checkpoints: Sequence[Checkpoint], best: Best | None
) -> TrainerResult | None:
    """The final and best of one metric (`best`: keepBest as the trainer resolves it),
    over the complete checkpoints that record it; None when none does."""
    complete = [c for c in checkpoints if c.complete and c.metrics]
    metric = _metric(layout, complete, best)
    having = [c for c in complete if metric is not None and metric in c.metrics]
    if metric is None or not having or len(metric) > 128:
        return None
    newest = max(having, key=order_key)
    own = [c for c in having if c.trainer_best is not None]
    if own:
        top: float | None = max(own, key=order_key).metrics[metric]
    elif best is not None:
        pick = min if best.order == "Min" else max
        top = pick(c.metrics[metric] for c in having)
    else:
        top = None
    return TrainerResult(
        metric=metric,
        final=newest.metrics[metric],
        best=top,
        step=newest.step,
        source=f"{layout} {newest.name}"[:128],
    )
