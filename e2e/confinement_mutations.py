"""The generated half of the confinement corpus: every way to change an object the operator
writes, one field at a time, from the object itself and from the API server's own schema.

For an object as the operator's write leaves it, `edits` walks every field under the given
roots: each present value changed (another value of its type, another member of its
enum) and removed, each list shortened and lengthened, each map given a foreign key, and
each property the OpenAPI schema knows but the object lacks added with a value drawn from
that schema. Each edit, made on top of the operator's own write, is a write the
confinement policy must refuse, unless the edit touches a field the policy lets vary
(`free`). Many drawn values are invalid for the API server itself; the test keeps only
those an admin's request gets through.
"""

import copy
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

JSON = dict[str, Any]
Path = tuple[str | int, ...]
REMOVE = object()
"""An edit's value that removes the field."""
PROBE = "confinement-probe"
"""The foreign key, name or value an edit adds."""
SERVER_FIELDS = frozenset(
    {"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink"}
)
"""metadata the API server sets: never edited, never compared."""
DEPTH = 6


@dataclass(frozen=True)
class Edit:
    path: Path
    value: Any

    def __str__(self) -> str:
        shown = "removed" if self.value is REMOVE else f"= {_short(self.value)}"
        return f"{dotted(self.path)} {shown}"


def dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Schemas:
    """The components of an OpenAPI v3 document, with $ref and allOf resolved."""

    def __init__(self, components: Mapping[str, JSON]) -> None:
        self.components = components

    def resolve(self, schema: JSON | None) -> JSON:
        schema = schema or {}
        for _ in range(DEPTH):
            ref = schema.get("$ref") or next(
                (s.get("$ref") for s in schema.get("allOf") or [] if "$ref" in s), None
            )
            if ref is None:
                return schema
            schema = self.components.get(ref.rsplit("/", 1)[-1], {})
        return schema

    def of_kind(self, group: str, version: str, kind: str) -> JSON:
        for schema in self.components.values():
            for gvk in schema.get("x-kubernetes-group-version-kind") or []:
                if (gvk.get("group"), gvk.get("version"), gvk.get("kind")) == (
                    group,
                    version,
                    kind,
                ):
                    return schema
        raise LookupError(f"{group}/{version} {kind} is not in the OpenAPI document")

    def child(self, schema: JSON, key: str | int) -> JSON:
        schema = self.resolve(schema)
        if isinstance(key, int):
            return self.resolve(schema.get("items"))
        properties = schema.get("properties") or {}
        if key in properties:
            return self.resolve(properties[key])
        extra = schema.get("additionalProperties")
        return self.resolve(extra) if isinstance(extra, dict) else {}

    def sample(self, schema: JSON, depth: int = 0) -> Any:
        """A value the schema admits, as small as it gets (validity beyond the schema is
        the API server's to judge)."""
        schema = self.resolve(schema)
        if schema.get("enum"):
            return schema["enum"][0]
        if schema.get("x-kubernetes-int-or-string") or "oneOf" in schema:
            return 1
        kind = schema.get("type")
        if kind == "boolean":
            return True
        if kind in ("integer", "number"):
            return 1
        if kind == "string":
            return _string(schema)
        if kind == "array":
            return [self.sample(schema.get("items") or {}, depth + 1)] if depth < DEPTH else []
        properties = schema.get("properties") or {}
        if depth >= DEPTH:
            return {}
        if properties:
            wanted = list(schema.get("required") or []) or sorted(properties)[:1]
            return {k: self.sample(properties[k], depth + 1) for k in wanted}
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            return {PROBE: self.sample(extra, depth + 1)}
        return {}


def _string(schema: JSON) -> str:
    return {"date-time": "2026-01-01T00:00:00Z", "byte": "cHJvYmU="}.get(
        schema.get("format", ""), "x"
    )


def alternatives(value: Any, schema: JSON) -> list[Any]:
    """Other values of the type (and enum) of `value`."""
    enum = [v for v in schema.get("enum") or [] if v != value]
    if enum:
        return enum[:2]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [value + 1] + ([0] if value not in (0, -1) else [])
    if isinstance(value, str):
        return [_changed(value)]
    return []


def _changed(text: str) -> str:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        pass
    else:
        return (when + timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    number = re.fullmatch(r"(\d+)([a-zA-Z]*)", text)
    if number:  # a quantity, a port, a count
        return f"{int(number[1]) + 1}{number[2]}"
    return text + "x" if not text.startswith("/") else text.rstrip("/") + "/x"


def _present(schemas: Schemas, node: Any, schema: JSON, path: Path, root: bool) -> Iterator[Edit]:
    """Edits of what is there: each value changed and removed, lists and maps grown."""
    if not root:
        yield Edit(path, REMOVE)
    if isinstance(node, dict):
        if not schemas.resolve(schema).get("properties"):  # a map: a foreign key
            yield Edit((*path, PROBE), _probe_like(next(iter(node.values()), "x")))
        for key, value in node.items():
            yield from _present(schemas, value, schemas.child(schema, key), (*path, key), False)
    elif isinstance(node, list):
        if node:
            yield Edit(path, [*copy.deepcopy(node), _renamed(node[-1])])
        if len(node) > 1:
            yield Edit(path, copy.deepcopy(node[:-1]))
        for i, value in enumerate(node):
            yield from _present(schemas, value, schemas.child(schema, i), (*path, i), False)
    else:
        for other in alternatives(node, schemas.resolve(schema)):
            yield Edit(path, other)


def _probe_like(value: Any) -> Any:
    return PROBE if isinstance(value, str) else copy.deepcopy(value)


def _renamed(item: Any) -> Any:
    item = copy.deepcopy(item)
    if isinstance(item, dict) and isinstance(item.get("name"), str):
        item["name"] = f"{item['name']}-{PROBE}"
    return item


def _absent(schemas: Schemas, node: Any, schema: JSON, path: Path) -> Iterator[Edit]:
    """Edits adding what is not there: every property of the schema the object lacks."""
    resolved = schemas.resolve(schema)
    if isinstance(node, dict):
        for key, prop in sorted((resolved.get("properties") or {}).items()):
            if key not in node:
                yield Edit((*path, key), schemas.sample(prop))
        for key, value in node.items():
            yield from _absent(schemas, value, schemas.child(schema, key), (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _absent(schemas, value, schemas.child(schema, i), (*path, i))


def edits(
    obj: JSON, schema: JSON, schemas: Schemas, roots: tuple[str, ...], free: Callable[[Edit], bool]
) -> list[Edit]:
    """Every single-field edit of `obj` under `roots` the policy must refuse."""
    found: list[Edit] = []
    for root in roots:
        node = obj.get(root, {})
        sub = schemas.child(schema, root)
        found += _present(schemas, node, sub, (root,), True)
        found += _absent(schemas, node, sub, (root,))
    return [
        e
        for e in found
        if not free(e)
        and not (e.path[0] == "metadata" and len(e.path) > 1 and e.path[1] in SERVER_FIELDS)
    ]


def edited(obj: JSON, edit: Edit) -> JSON:
    """A copy of `obj` with `edit` made."""
    out = copy.deepcopy(obj)
    node: Any = out
    for step in edit.path[:-1]:
        node = node.setdefault(step, {}) if isinstance(node, dict) else node[step]
    last = edit.path[-1]
    if edit.value is REMOVE:
        del node[last]
    else:
        node[last] = copy.deepcopy(edit.value)
    return out


def cleaned(obj: JSON, *, uid: str | None = None) -> JSON:
    """`obj` without what the API server sets itself, and with a created object's uid (in
    its selector and labels) made neutral, for comparing two answers."""
    out = copy.deepcopy(obj)
    meta = out.get("metadata") or {}
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    if uid:
        out = _replace(out, uid, "<uid>")
    return out


def _replace(node: Any, old: str, new: str) -> Any:
    if isinstance(node, dict):
        return {k: _replace(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(v, old, new) for v in node]
    return new if node == old else node
