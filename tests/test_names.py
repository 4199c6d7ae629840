"""Every `trainwarden.dev/...` name has one home, api/v1alpha1/names.py: no other module
spells one, each says who writes and reads it, and the docs name only keys that exist."""

import ast
import re
from pathlib import Path

from trainwarden.api.v1alpha1 import CheckpointPolicy, IdleReclaimPolicy, TrainingBudget, names
from trainwarden.api.v1alpha1.receipt import RunReceipt
from trainwarden.api.v1alpha1.types import API_VERSION, GROUP
from trainwarden.api.v1alpha1.usage import BudgetUsage

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "operator" / "trainwarden"
HOME = PACKAGE / "api" / "v1alpha1" / "names.py"
KEY = re.compile(r"(?:[a-z0-9-]+\.)*trainwarden\.dev/[a-z0-9-]*")
"""A label/annotation key (or prefix) of trainwarden's, with any `<sub>.` before it."""
HARNESS = {
    "trainwarden.dev/real-node": ROOT / "e2e" / "harness.py",
    "faults.trainwarden.dev/suite": ROOT / "faults",
    "bench.trainwarden.dev/scale": ROOT / "bench",
}
"""Keys of the local cluster and its tools, not the operator's: the docs may name them, as
long as the tool that uses them still does."""


def _values() -> dict[str, str]:
    return {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function and
    attribute docstrings: a string standing alone as a statement)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def literals(source: str) -> list[tuple[int, str]]:
    """(line, literal) for each string literal in `source` holding a trainwarden key,
    docstrings excepted (f-strings' literal parts included)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and KEY.search(node.value)
    )


def spelled(path: Path) -> list[str]:
    in_api = path.parent == HOME.parent
    return [
        f"{path.relative_to(ROOT)}:{line}: {value!r}"
        for line, value in literals(path.read_text())
        # the models' `apiVersion: Literal[...]`, as the CRD generator reads them
        if not (in_api and value == API_VERSION)
    ]


def test_no_module_but_the_names_module_spells_a_trainwarden_key() -> None:
    found = [hit for p in sorted(PACKAGE.rglob("*.py")) if p != HOME for hit in spelled(p)]
    assert found == [], "import these from trainwarden.api.v1alpha1.names:\n" + "\n".join(found)


def test_the_walk_finds_a_key_in_code_and_not_in_a_docstring() -> None:
    source = (
        '"""Reads trainwarden.dev/exempt."""\n'
        'X = "trainwarden.dev/exempt"\n'
        '"""X is trainwarden.dev/exempt."""\n'
        'Y = f"metric.trainwarden.dev/{X}"\n'
        'Z = "see trainwarden.dev/budget"\n'
    )
    assert [line for line, _ in literals(source)] == [2, 4, 5]


def test_every_name_is_trainwardens_and_says_who_writes_and_reads_it() -> None:
    assert f"{GROUP}/" == names.PREFIX
    tree = ast.parse(HOME.read_text())
    body = tree.body
    constants = [
        (i, node.target.id)
        for i, node in enumerate(body)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    assert {name for _, name in constants} == set(_values())
    for i, name in constants:
        assert names.PREFIX in _values()[name] or name.endswith("_KIND"), name
        follows = body[i + 1] if i + 1 < len(body) else None
        assert isinstance(follows, ast.Expr), f"{name} has no docstring"
        assert isinstance(follows.value, ast.Constant), f"{name} has no docstring"


def _documented() -> dict[str, list[str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found: dict[str, list[str]] = {}
    for doc in docs:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for key in KEY.findall(line):
                found.setdefault(key, []).append(f"{doc.relative_to(ROOT)}:{n}")
    return found


def test_the_docs_name_only_keys_the_names_module_has() -> None:
    known = set(_values().values())
    prefixes = {v for v in known if v.endswith("/")}
    unknown = {}
    for key, where in _documented().items():
        if key in known or key in prefixes or key == API_VERSION:
            continue
        if key.endswith("-") and key[:-1] in known:
            continue  # `<key>-NAME`: a name built from a key and a placeholder
        if key in HARNESS:
            continue
        unknown[key] = where
    assert unknown == {}, f"documented keys the operator does not have: {unknown}"


def test_the_harness_keys_the_docs_name_are_still_used_by_their_tool() -> None:
    for key, where in HARNESS.items():
        files = [where] if where.is_file() else sorted(where.rglob("*.py"))
        assert any(key in f.read_text() for f in files), f"{key} no longer in {where}"


def test_the_kinds_are_the_models_kinds() -> None:
    models = {
        names.BUDGET_KIND: TrainingBudget,
        names.IDLE_KIND: IdleReclaimPolicy,
        names.CHECKPOINT_KIND: CheckpointPolicy,
        names.RECEIPT_KIND: RunReceipt,
        names.USAGE_KIND: BudgetUsage,
    }
    assert {kind: m.model_fields["kind"].default for kind, m in models.items()} == {
        kind: kind for kind in models
    }
