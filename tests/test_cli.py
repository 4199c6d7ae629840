"""The command line as a user meets it: the flags every cluster command takes, --version,
the kubectl plugin name, -o json|yaml, and what it says when the cluster cannot be reached
or refuses: one line on stderr and exit code 3, never a traceback.

The cluster here is a closed localhost port, or a small HTTP server standing in for the API
server (a 403 with the API server's Status body, or empty lists): the real kubernetes
client goes through its real connection and error paths."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainwarden import cli

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_COMMANDS = {
    "run": [],
    "report": [],
    "estimate": ["-f", "job.yaml"],
}
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train", "namespace": "vision"},
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
        }
    },
}
FORBIDDEN = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'trainingbudgets.trainwarden.dev is forbidden: User "alice" cannot list '
    'resource "trainingbudgets" in API group "trainwarden.dev" at the cluster scope',
    "reason": "Forbidden",
    "code": 403,
}


def kubeconfig(path: Path, server: str, *, context: str = "here") -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [
            {"name": context, "context": {"cluster": "c", "user": "u", "namespace": "vision"}},
            {"name": "elsewhere", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "elsewhere",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class FakeAPIServer(ThreadingHTTPServer):
    status = 200
    body: dict[str, Any] = {}  # noqa: RUF012 - set per test
    paths: list[str]


class Handler(BaseHTTPRequestHandler):
    server: FakeAPIServer

    def do_GET(self) -> None:
        self.server.paths.append(self.path)
        payload = json.dumps(self.server.body).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: object) -> None:
        return


@pytest.fixture
def fake_api() -> Iterator[FakeAPIServer]:
    server = FakeAPIServer(("127.0.0.1", 0), Handler)
    server.paths = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_every_cluster_command_takes_kubeconfig_and_context() -> None:
    parser = cli.parser()
    for command, rest in CLUSTER_COMMANDS.items():
        args = parser.parse_args([command, *rest, "--kubeconfig", "k", "--context", "c"])
        assert (args.kubeconfig, args.context) == ("k", "c"), command
        if command != "run":  # the operator's client has its own timeouts
            timed = parser.parse_args([command, *rest, "--request-timeout", "2.5"])
            assert (timed.request_timeout, parser.parse_args([command, *rest]).request_timeout) == (
                2.5,
                60.0,
            )
        assert parser.parse_args([command, *rest]).kubeconfig is None


def test_the_status_interval_is_5_minutes_unless_told_within_10_seconds_and_an_hour(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from datetime import timedelta

    parser = cli.parser()
    assert parser.parse_args(["run"]).status_interval == timedelta(minutes=5)
    assert parser.parse_args(["run", "--status-interval", "30s"]).status_interval == timedelta(
        seconds=30
    )
    for wrong in ("5s", "2h", "often"):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--status-interval", wrong])
    assert "must be from 10s to 1h" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "-o", "yaml"],
        ["report", "--runs", "-o", "yaml", "-n", "vision"],
        ["prune", "DIR", "--policy", "p.yaml", "-o", "yaml"],
        ["estimate", "-f", "job.yaml", "-o", "yaml"],
    ],
)
def test_commands_that_print_objects_take_json_and_yaml(argv: list[str]) -> None:
    assert cli.parser().parse_args(argv).output == "yaml"
    assert cli.parser().parse_args([*argv[:-2], "-o", "json"]).output == "json"


def test_version_and_the_kubectl_plugin_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"trainwarden {version('trainwarden')}\n"

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-trainwarden"] == scripts["trainwarden"] == "trainwarden.cli:main"
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/kubectl-trainwarden"])
    assert cli.parser().prog == "kubectl trainwarden"  # as kubectl shows it in help


@pytest.mark.parametrize("argv", [["report"], ["report", "--runs"], ["report", "-o", "json"]])
def test_an_unreachable_cluster_is_one_line_and_exit_3(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{closed_port()}")
    assert cli.main([*argv, "--kubeconfig", str(config)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("trainwarden report: cannot reach the API server: ")
    assert "Connection refused" in lines[0]


def test_the_installed_command_says_one_line_not_a_traceback(tmp_path: Path) -> None:
    """As a user runs it: a process, its kubeconfig from $KUBECONFIG."""
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{closed_port()}")
    env = {"KUBECONFIG": str(config), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "trainwarden", "report", "--runs"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("trainwarden report: cannot reach the API server: ")
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("argv", [["report"], ["report", "--runs"], ["estimate", "-f", "JOB"]])
def test_an_api_server_that_stopped_answering_is_exit_3_not_a_hang(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """It accepts the connection (the kernel's backlog) and never answers."""
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(JOB))
    argv = [str(tmp_path / "job.yaml") if a == "JOB" else a for a in argv]
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{silent.getsockname()[1]}")
        started = time.monotonic()
        code = cli.main([*argv, "--kubeconfig", str(config), "--request-timeout", "0.2"])
        took = time.monotonic() - started
    assert code == 3
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "cannot reach the API server: " in err
    assert "timed out" in err
    assert took < 10


def test_a_forbidden_list_is_one_line_naming_what_was_refused_and_exit_3(
    tmp_path: Path, fake_api: FakeAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.status, fake_api.body = 403, FORBIDDEN
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{fake_api.server_port}")
    assert cli.main(["report", "--kubeconfig", str(config), "-o", "json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "trainwarden report: forbidden (403 Forbidden): " + FORBIDDEN["message"] + "\n"
    )


def test_estimate_reads_budgets_through_the_chosen_context_and_says_why_it_cannot(
    tmp_path: Path, fake_api: FakeAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.status, fake_api.body = 403, FORBIDDEN
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{fake_api.server_port}")
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({**JOB, "metadata": {"name": "t"}}))
    argv = ["estimate", "-f", str(tmp_path / "job.yaml"), "--kubeconfig", str(config)]
    assert cli.main([*argv, "--context", "here"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("trainwarden estimate: cannot read TrainingBudgets from the cluster: ")
    assert "forbidden (403 Forbidden): trainingbudgets.trainwarden.dev is forbidden" in err
    assert len(err.splitlines()) == 1

    fake_api.status, fake_api.body = 200, {"kind": "List", "items": [], "metadata": {}}
    assert cli.main([*argv, "--context", "here", "-o", "yaml"]) == 0
    # the context's namespace is where the manifest without one would be created
    workloads = yaml.safe_load(capsys.readouterr().out)["workloads"]
    assert [w["namespace"] for w in workloads] == ["vision"]
    assert cli.main([*argv, "--context", "nowhere"]) == 3
    assert "cannot load cluster credentials" in capsys.readouterr().err


def test_report_prints_yaml_the_same_data_as_json(
    tmp_path: Path, fake_api: FakeAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.body = {"kind": "List", "items": [], "metadata": {}}
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{fake_api.server_port}")
    for argv in (["report"], ["report", "--runs", "-n", "vision"]):
        assert cli.main([*argv, "--kubeconfig", str(config), "-o", "json"]) == 0
        as_json = json.loads(capsys.readouterr().out)
        assert cli.main([*argv, "--kubeconfig", str(config), "-o", "yaml"]) == 0
        as_yaml = yaml.safe_load(capsys.readouterr().out)
        if "generatedAt" in as_json:  # the report's own time differs between the two runs
            as_json.pop("generatedAt"), as_yaml.pop("generatedAt")
        assert as_yaml == as_json
    assert "/apis/trainwarden.dev/v1alpha1/namespaces/vision/runreceipts" in " ".join(
        fake_api.paths
    )


def test_no_kubeconfig_outside_a_cluster_is_exit_3_and_prints_nothing_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubernetes' own load_config would print its fallback to stdout and try in-cluster."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["report", "-o", "json"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"trainwarden report: cannot load cluster credentials: no kubeconfig at "
        f"{tmp_path / 'none'} and not in a cluster\n"
    )


def checkpoint(root: Path, step: int, loss: float) -> None:
    """A Hugging Face Trainer checkpoint an hour old, its loss logged at its step."""
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    state = {"global_step": step, "log_history": [{"step": step, "loss": loss}]}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    stamp = time.time() - 3600 + step
    for path in (*ckpt.iterdir(), ckpt):
        os.utime(path, (stamp, stamp))


@pytest.mark.parametrize("steps", [[10, 20, 30, 40], []])
def test_prune_prints_the_same_plan_as_yaml_and_as_json(
    tmp_path: Path, steps: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Written as it goes in both forms; numbers stay numbers (1e-05 too, which a JSON
    row passed off as YAML would turn into a string)."""
    root = tmp_path / "out"
    root.mkdir()
    for step in steps:
        checkpoint(root, step, loss=1e-06 * step)
    spec = {
        "kind": "CheckpointPolicy",
        "spec": {
            "mode": "DryRun",
            "scope": {"namespaces": ["team"]},
            "storage": {"pvc": {}},
            "layout": {"type": "HuggingFace"},
            "retention": {"minAge": "10m", "keepLast": 1, "keepBest": {"metric": "loss"}},
        },
    }
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(spec))
    argv = ["prune", str(root), "--policy", str(tmp_path / "policy.yaml")]
    assert cli.main([*argv, "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert cli.main([*argv, "-o", "yaml"]) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    # Two runs: each says when it scanned, to the second, and they may straddle one.
    json_times, yaml_times = scan_times(as_json), scan_times(as_yaml)
    assert len(json_times) == len(yaml_times) > 0
    assert all(abs(a - b) <= 1 for a, b in zip(json_times, yaml_times, strict=True))
    assert as_yaml == as_json
    assert len(as_json["checkpoints"]) == len(steps)
    if steps:
        assert as_yaml["checkpoints"][0]["metrics"] == {"loss": 1e-06 * 10}


def scan_times(doc: Any) -> list[int]:
    """Every `scannedAt` in `doc`, removed from it, in document order."""
    found: list[int] = []
    if isinstance(doc, dict):
        if "scannedAt" in doc:
            found.append(int(doc.pop("scannedAt")))
        for value in doc.values():
            found += scan_times(value)
    elif isinstance(doc, list):
        for value in doc:
            found += scan_times(value)
    return found


def test_release_all_unreachable_or_forbidden_is_one_line_and_exit_3(
    tmp_path: Path, fake_api: FakeAPIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = kubeconfig(tmp_path / "closed", f"http://127.0.0.1:{closed_port()}")
    assert cli.main(["release-all", "--kubeconfig", str(closed)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("trainwarden release-all: cannot reach the API server: ")
    assert len(captured.err.splitlines()) == 1, captured.err
    fake_api.status, fake_api.body = 403, FORBIDDEN
    config = kubeconfig(tmp_path / "config", f"http://127.0.0.1:{fake_api.server_port}")
    assert cli.main(["release-all", "--kubeconfig", str(config), "--dry-run"]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("trainwarden release-all: forbidden (403 Forbidden): ")
    assert len(captured.err.splitlines()) == 1, captured.err
