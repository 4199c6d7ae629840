"""`-o json` and `-o yaml`: the same plain data, in either form, on every command."""

import json
from typing import Any

import yaml

FORMATS = ("json", "yaml")


def document(data: Any, output: str) -> str:
    """The text `-o json|yaml` prints: JSON indented by 2, or block-style YAML in the
    data's own key order."""
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
    return json.dumps(data, indent=2) + "\n"
