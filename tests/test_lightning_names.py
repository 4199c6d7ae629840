"""Lightning checkpoint names, generated the way Lightning 2.6 writes them, read back.

`lightning_name` follows `ModelCheckpoint._format_checkpoint_name` and
`format_checkpoint_name` (lightning/pytorch/callbacks/model_checkpoint.py): the template's
`{name}` / `{name:spec}` groups (found by `(\\{.*?)[:\\}]`, longest first) become
`name={name...}` when `auto_insert_metric_name`, are formatted from the metrics, a prefix
and `-v<ver>` are joined with `-`, and `.ckpt` is appended. Values are formatted as
Python formats the tensor's item with the group's spec.
"""

import json
import os
import re
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwarden.api.v1alpha1.checkpoint import Layout
from trainwarden.core.retention import Checkpoint
from trainwarden.storage.layouts import scan_directory


def read_back(name: str) -> Checkpoint:
    """The checkpoint a scan finds for one file of that name (a "/" nests it)."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0")
        (found,) = scan_directory(Path(root), Layout(type="Lightning")).checkpoints
        return found


def parse(name: str) -> Checkpoint:
    return read_back(name)


def lightning_name(
    template: str, metrics: dict[str, float | int], ver: int | None = None, auto: bool = True
) -> str:
    """ModelCheckpoint.format_checkpoint_name, for names without a directory."""
    filename = template or "{epoch}-{step}"
    groups = sorted(re.findall(r"(\{.*?)[:\}]", filename), key=len, reverse=True)
    values = dict(metrics)
    for group in groups:
        name = group[1:]
        if auto:
            filename = filename.replace(group, name + "={" + name)
        filename = filename.replace(group, f"{{0[{name}]")
        values.setdefault(name, 0)
    filename = filename.format(values)
    if ver is not None:
        filename = f"{filename}-v{ver}"
    return f"{filename}.ckpt"


def test_the_names_in_lightnings_own_docstrings() -> None:
    assert lightning_name("{epoch}-{val_loss:.2f}", {"epoch": 2, "val_loss": 0.123456}) == (
        "epoch=2-val_loss=0.12.ckpt"
    )
    assert lightning_name("{epoch:03d}", {"epoch": 5}) == "epoch=005.ckpt"
    assert lightning_name("", {"epoch": 0, "step": 30}) == "epoch=0-step=30.ckpt"


def test_the_issues_names_read_every_metric() -> None:
    # On main the value pattern swallowed the "-": val_loss read '0.2610-', not a number.
    parsed = parse("epoch=0-val_loss=0.2610-val_mae=0.4276-v1.ckpt")
    assert parsed.metrics == {"val_loss": 0.2610, "val_mae": 0.4276}
    assert parse("epoch=0-step=30.ckpt").step == 30
    docstring = parse("sample-mnist-epoch=02-val_loss=0.32.ckpt")
    assert docstring.metrics["val_loss"] == 0.32
    assert parse("epoch=3-val/loss=0.25.ckpt").metrics == {"val/loss": 0.25}
    assert parse("epoch=1-lr=1e-05-val_loss=-0.5.ckpt").metrics == {"lr": 1e-05, "val_loss": -0.5}
    assert parse("epoch=1-val-loss=0.5.ckpt").metrics["val-loss"] == 0.5
    assert parse("checkpoint_epoch=01-acc=95.0%.ckpt").metrics["acc"] == 0.95
    assert parse("epoch=1-val_loss=nan.ckpt").metrics == {}
    assert parse("lr=1.2.3-step=5.ckpt").metrics == {}
    # Text glued to a field by "_" is part of its name: only epoch and step are told apart.
    glued = parse("run7_epoch=3-run7_step=40-best_val_loss=0.5.ckpt")
    assert (glued.step, glued.metrics) == (40, {"best_val_loss": 0.5})


_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True).filter(
    lambda n: n not in ("epoch", "step") and not n.startswith("v")
)
_FLOAT_SPECS = st.sampled_from(["", ".2f", ".4f", ".3e", "g", ".3g", "+.3f", "08.3f"])
_VALUES = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def templates(draw: st.DrawFn) -> tuple[str, dict[str, float | int], dict[str, str]]:
    """A template of epoch, step and metrics, joined by "-" (Lightning's default) or "_",
    maybe after some literal text; the metrics it formats; each metric's spec."""
    names = draw(st.lists(_NAMES, max_size=4, unique=True))
    specs = {n: draw(_FLOAT_SPECS) for n in names}
    fields = ["{epoch}", draw(st.sampled_from(["{step}", "{step:05d}"]))]
    fields += [f"{{{n}:{s}}}" if s else f"{{{n}}}" for n, s in specs.items()]
    order = draw(st.permutations(fields))
    prefix = draw(st.sampled_from(["", "sample-mnist-", "run7-"]))
    template = prefix + draw(st.sampled_from(["-", "_"])).join(order)
    metrics: dict[str, float | int] = {"epoch": draw(st.integers(0, 999))}
    metrics["step"] = draw(st.integers(0, 10**9))
    metrics |= {n: draw(_VALUES) for n in names}
    return template, metrics, specs


@settings(max_examples=1000)
@given(templates(), st.none() | st.integers(1, 30))
def test_every_name_lightning_writes_reads_back_its_step_metrics_and_version(
    made: tuple[str, dict[str, float | int], dict[str, str]], ver: int | None
) -> None:
    from trainwarden.storage.lightning_names import parse as parse_name

    template, metrics, specs = made
    name = lightning_name(template, metrics, ver)
    parsed = parse(name)
    assert parsed.step == metrics["step"], name
    assert parse_name(name).version == ver, name
    for metric, spec in specs.items():
        written = format(float(metrics[metric]), spec)
        assert parsed.metrics[metric] == float(written), (name, metric)


@settings(max_examples=1000)
@given(templates(), st.sampled_from(["val/loss", "train/acc_top1"]), _FLOAT_SPECS)
def test_a_metric_name_with_a_slash_reads_back_from_the_nested_path(
    made: tuple[str, dict[str, float | int], dict[str, str]], slashed: str, spec: str
) -> None:
    template, metrics, _ = made
    template += f"-{{{slashed}:{spec}}}" if spec else f"-{{{slashed}}}"
    value = 0.125
    name = lightning_name(template, {**metrics, slashed: value})
    assert "/" in name, "Lightning nests the file: the directory and the file name"
    parsed = parse(name)
    assert parsed.metrics[slashed] == float(format(value, spec))
    assert parsed.step == metrics["step"]


def test_a_nested_checkpoint_is_its_directory_with_the_metric_of_its_path(
    tmp_path: Path,
) -> None:
    (tmp_path / "epoch=0-step=4-val").mkdir()
    (tmp_path / "epoch=0-step=4-val" / "loss=0.2500.ckpt").write_bytes(b"\0")
    (tmp_path / "epoch=1-step=8-val").mkdir()  # Lightning removed its file, not the directory
    (tmp_path / "lightning_logs").mkdir()
    (tmp_path / "lightning_logs" / "hparams.yaml").write_text("{}")
    got = {c.name: c for c in scan_directory(tmp_path, Layout(type="Lightning")).checkpoints}
    assert set(got) == {"epoch=0-step=4-val"}
    assert (got["epoch=0-step=4-val"].step, got["epoch=0-step=4-val"].metrics) == (
        4,
        {"val/loss": 0.25},
    )


def test_a_nested_checkpoint_is_deleted_whole_when_no_rule_keeps_it(tmp_path: Path) -> None:
    from trainwarden.storage.pruning import load_spec, prune

    for step, loss in ((4, 0.5), (8, 0.25), (12, 0.75)):
        nested = tmp_path / f"epoch={step // 4 - 1}-step={step}-val"
        nested.mkdir()
        (nested / f"loss={loss}.ckpt").write_bytes(b"\0")
        for path in (nested / f"loss={loss}.ckpt", nested):
            os.utime(path, (1000 + step, 1000 + step))
    spec = {
        "spec": {
            "mode": "Enforce",
            "scope": {"namespaces": ["team"]},
            "storage": {"pvc": {}},
            "layout": {"type": "Lightning"},
            "retention": {"keepLast": 1, "keepBest": {"metric": "val/loss"}},
        }
    }
    report = prune(tmp_path, load_spec(json.dumps(spec)), dry_run=False)
    assert report.deleted == ["epoch=0-step=4-val"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "epoch=1-step=8-val",
        "epoch=2-step=12-val",
    ]
