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
    """Every key of values.yaml, sections (non-empty mappings) included, with the comment
    lines right above it."""
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
        if _section(default):
            stack.append((indent, match["key"]))
        found.append(Value(path, default, doc))
    return found


def _section(value: Any) -> bool:
    return isinstance(value, dict) and bool(value)


def _lookup(data: Any, path: str) -> Any:
    for key in path.split("."):
        data = data[key]
    return data


def render(chart: Path = CHART) -> str:
    text = (chart / "values.yaml").read_text()
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    found = values(text)
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
    for v in found:
        if not _section(v.default):
            lines.append(f"| `{v.path}` | `{json.dumps(v.default)}` | {_cell(v.doc)} |")
    sect = [
        f"- **`{v.path}`**: {_cell(v.doc)}"
        for v in found
        if _section(v.default) and "." not in v.path and v.doc
    ]
    if sect:
        lines += ["", "## Sections", "", *sect]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    target = CHART / "README.md"
    target.write_text(render())
    sys.stdout.write(f"wrote {target}\n")
