"""How the commands reach the cluster, and what they say when they cannot.

Every command that talks to the API server takes `--kubeconfig` and `--context` (as kubectl
does, so `kubectl trainwarden ...` passes them through), loads its credentials here, and
turns a failure to reach or be allowed by the cluster into one line on stderr and exit
code 3, never a traceback. The exit codes below hold for every command (README, "Exit
codes").
"""

import argparse
import os
from pathlib import Path
from typing import Any

OK = 0
FINDINGS = 1
"""estimate --fail-over found a workload over it; a doctor check failed; prune's run failed
(its report says why)."""
USAGE = 2
"""Bad flags or input the command cannot read (argparse exits 2 too)."""
CLUSTER = 3
"""No kubeconfig or context, the API server unreachable, or a request refused (401, 403)
or failed (any other API error)."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """--kubeconfig and --context, with kubectl's meaning."""
    parser.add_argument(
        "--kubeconfig",
        help="the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the "
        "in-cluster service account)",
    )
    parser.add_argument("--context", help="the kubeconfig context (default: its current one)")


def add_timeout(parser: argparse.ArgumentParser) -> None:
    """--request-timeout, for the commands that read and exit (not `run`, whose client
    has its own: adapters/kube_client.py REQUEST_TIMEOUT)."""
    parser.add_argument(
        "--request-timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="give up on an API request after this long (default 60): an API server that "
        "stopped answering is exit 3, not a hang",
    )


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(f"{value!r} is not 0 < seconds <= 3600")
    return seconds


def paths(kubeconfig: str | None) -> str:
    """The kubeconfig file(s) to read: --kubeconfig, else $KUBECONFIG (a list, merged as
    kubectl merges it), else ~/.kube/config; read when the command runs, not at import."""
    return kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"


def load(kubeconfig: str | None, context: str | None) -> None:
    """Load the credentials every client of this process uses.

    Not kubernetes' load_config: without a kubeconfig it prints to stdout (breaking
    `-o json`) and falls back to in-cluster credentials even outside a pod.
    """
    from kubernetes import config

    files = paths(kubeconfig)
    found = any(Path(p).expanduser().exists() for p in files.split(os.pathsep) if p)
    if kubeconfig or context or found:
        config.load_kube_config(config_file=files, context=context)  # type: ignore[no-untyped-call]
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    else:
        raise config.ConfigException(f"no kubeconfig at {files} and not in a cluster")


def failure(error: BaseException) -> str | None:
    """One line saying which cluster access failed and why; None for any other error."""
    from kubernetes.client.exceptions import ApiException, ApiValueError
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    if isinstance(error, ConfigException):
        return f"cannot load cluster credentials: {_short(error)}"
    if isinstance(error, ApiException):
        return _refused(error)
    if isinstance(error, HTTPError | ApiValueError):
        return f"cannot reach the API server: {_short(error)}"
    return None


def _refused(error: Any) -> str:
    """An ApiException: its status, and the API server's message where it sent one."""
    import json

    message = ""
    try:
        message = str(json.loads(error.body or "{}").get("message") or "")
    except (ValueError, AttributeError, TypeError):
        message = ""
    what = {401: "unauthorized", 403: "forbidden"}.get(error.status, "API error")
    return f"{what} ({error.status} {error.reason}): {_short(message or error.body or '')}"


def _short(value: object) -> str:
    """One line of at most 300 characters."""
    return " ".join(str(value).split())[:300]
