"""The chart's README, generated from values.yaml: every value with its default and the
comment above it, so the page Artifact Hub and `helm show readme` print cannot drift from
what the chart reads (tests/test_chart_files.py fails when it is stale).

Run: .venv/bin/python helm/readme.py   (or `make chart-readme`)
"""

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "trainwarden"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][\w-]*):(?P<rest>.*)$")


@dataclass(frozen=True)
class Value:
    path: str
    default: Any
    doc: str


def values(text: str) -> list[Value]:
    """Every key of values.yaml whose value is not a non-empty mapping (those are sections,
    listed apart), with the comment lines right above it."""
    data = yaml.safe_load(text)
    found: list[Value] = []
    comments: list[str] = []
    stack: list[tuple[int, str]] = []  # the sections the next key may be inside
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if not match:
            comments = []
            continue
        indent = len(match["indent"])
        stack = [s for s in stack if s[0] < indent]
        path = ".".join([*(k for _, k in stack), match["key"]])
        doc, comments = " ".join(comments), []
        try:
            default = _lookup(data, path)
        except (KeyError, TypeError):  # a key inside a list item: the list is the value
            continue
        if isinstance(default, dict) and default:
            stack.append((indent, match["key"]))
        else:
            found.append(Value(path, default, doc))
    return found


def _lookup(data: Any, path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


def sections(text: str) -> dict[str, str]:
    """The comment above each top-level section, shown once as its heading's text."""
    out: dict[str, str] = {}
    comments: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            comments.append(line.lstrip("#").strip())
        elif (match := KEY.match(line)) and not match["indent"]:
            out[match["key"]] = " ".join(comments)
            comments = []
        elif not line.strip():
            comments = []
    return out


def render(chart: Path = CHART) -> str:
    text = (chart / "values.yaml").read_text()
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    heads = sections(text)
    lines = [
        f"# {meta['name']}",
        "",
        f"{meta['description']}",
        "",
        f"Chart version {meta['version']}, app version {meta['appVersion']}, Kubernetes "
        f"`{meta['kubeVersion']}`. Installing, upgrading and what each permission is for: "
        "docs/install.md in the repository. This page is generated from values.yaml by "
        "`helm/readme.py` (`make chart-readme`); edit the comments there.",
        "",
        "## Values",
        "",
        "| key | default | description |",
        "|---|---|---|",
    ]
    for v in values(text):
        lines.append(f"| `{v.path}` | `{json.dumps(v.default)}` | {_cell(v.doc)} |")
    sect = [f"- **`{k}`**: {_cell(d)}" for k, d in heads.items() if d and _is_section(text, k)]
    if sect:
        lines += ["", "## Sections", "", *sect]
    return "\n".join(lines) + "\n"


def _is_section(text: str, key: str) -> bool:
    value = yaml.safe_load(text).get(key)
    return isinstance(value, dict) and bool(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    target = CHART / "README.md"
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")
