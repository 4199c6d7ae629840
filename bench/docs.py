"""Docs' benchmark tables, rendered from the benchmarks' recorded runs (bench/results/).

A table between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in a doc is written
from bench/results/NAME.json by RENDERERS[NAME]; `python bench/docs.py` rewrites every
such block, `--check` fails when one differs (tests/test_doc_figures.py runs it), so a
figure in docs/ is always the last recorded run's, with its date, commit and load.

To change a figure: run the benchmark with `--json bench/results/NAME.json`, then this.
"""

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(
    r"(<!-- bench:(?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- /bench:(?P=name) -->)", re.S
)


def _provenance(run: dict[str, Any]) -> str:
    load = run["load_average"][0]
    return (
        f"(`{run['command']}`, measured {run['measured'][:10]} at commit {run['commit']}, "
        f"{run['cpus']} CPUs at load {load:.1f})"
    )


def idle_evaluation(run: dict[str, Any]) -> str:
    lines = [
        "| pods | evaluations | evaluation | Prometheus queries / evaluation | query latency "
        "| status | operator RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in run["rows"]:
        lines.append(
            f"| {r['pods']:,} | {r['evaluations']} | {r['evaluation_ms']:.0f} ms "
            f"| {r['queries_per_evaluation']:.2f} | {r['query_ms']:.0f} ms "
            f"| {r['status_kib']:.1f} KiB | {r['operator_rss_mib']:.0f} MiB |"
        )
    return "\n".join(lines) + "\n\n" + _provenance(run) + "\n"


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "idle_evaluation": idle_evaluation,
}
COMMANDS = {"idle_evaluation": "bench/idle_evaluation.py"}


def render(text: str) -> str:
    def block(match: re.Match[str]) -> str:
        name = match["name"]
        run = json.loads((RESULTS / f"{name}.json").read_text()) | {"command": COMMANDS[name]}
        return match.group(1) + RENDERERS[name](run) + match.group(4)

    return BLOCK.sub(block, text)


def stale() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in DOCS if render(p.read_text()) != p.read_text()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        found = stale()
        for path in found:
            print(f"{path}: a benchmark table differs from bench/results (run bench/docs.py)")
        return 1 if found else 0
    for path in DOCS:
        text = path.read_text()
        if render(text) != text:
            path.write_text(render(text))
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
