"""Docs that cannot drift: benchmark tables are the last recorded run's, and every file
and test a doc names exists.

A figure typed by hand goes stale the day the code changes (README said 4 workers while
the code ran 8, 2, 4 and 1; docs/idle.md said one query while there were two), and a
path a refactor moved leaves the reader at a dead end."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
# Where a doc's relative paths are rooted: the repository, the package, the chart.
BASES = [ROOT, ROOT / "operator" / "trainwarden", ROOT / "helm" / "trainwarden", ROOT / "operator"]
NAMED = re.compile(
    r"`(?P<path>[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*\.(?:py|md|yaml|yml|sh|json|toml|txt|tpl|in))"
    r"(?:::(?P<test>[A-Za-z0-9_]+))?"
)


def test_benchmark_tables_in_docs_are_the_recorded_runs() -> None:
    """bench/docs.py --check: a table between bench markers differs from what its
    recorded run (bench/results/NAME.json) renders."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_benchmark_check_sees_a_figure_edited_by_hand(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import docs as bench_docs  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text = (ROOT / "docs" / "idle.md").read_text()
    assert "<!-- bench:idle_evaluation -->" in text
    assert bench_docs.render(text) == text
    edited = re.sub(r"\| (\d+) ms \|", lambda m: f"| {int(m[1]) - 1} ms |", text, count=1)
    assert edited != text
    assert bench_docs.render(edited) == text


def named_in_docs() -> list[tuple[str, str, str | None]]:
    return [
        (doc.name, m["path"], m["test"]) for doc in DOCS for m in NAMED.finditer(doc.read_text())
    ]


def test_every_file_and_test_a_doc_names_exists() -> None:
    named = named_in_docs()
    assert len(named) > 300, "the pattern still finds the docs' references"
    missing = []
    for doc, path, test in named:
        found = next((b / path for b in BASES if (b / path).is_file()), None)
        if found is None:
            missing.append(f"{doc}: `{path}` does not exist")
        elif test and not re.search(rf"^(async )?def {test}\b", found.read_text(), re.M):
            missing.append(f"{doc}: `{path}::{test}` is no test there")
    assert not missing, "\n".join(missing)
