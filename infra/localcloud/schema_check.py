"""A JSON value held to a discovery document's schema: unknown fields, wrong
types, bad enum values, with the messages Google's front end answers (e.g.
``Invalid value at 'instance.scheduling.automatic_restart' (TYPE_BOOL), "no"``).
"""

from __future__ import annotations

import json
import re
from typing import Any

JsonDict = dict[str, Any]
_INT = re.compile(r"^-?\d+$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-?Infinity$|^NaN$")


class Refusal(Exception):
    """A request's first violation, as the HTTP status and message Google answers."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def body_problem(schemas: JsonDict, root: str, body: Any, compute: bool) -> Refusal | None:
    """The first way ``body`` breaks schema ``root`` (``Instance``), or None;
    ``compute``: Compute Engine's wording for a bad enum value."""
    return _value_problem(schemas, {"$ref": root}, body, root[:1].lower() + root[1:], compute)


def _value_problem(
    schemas: JsonDict, spec: JsonDict, value: Any, where: str, compute: bool
) -> Refusal | None:
    if value is None:
        return None  # JSON null is the field's default
    if "$ref" in spec:
        spec = {**schemas[spec["$ref"]], **{k: v for k, v in spec.items() if k != "$ref"}}
    kind = spec.get("type")
    if kind == "object" or ("properties" in spec and kind is None):
        if not isinstance(value, dict):
            return Refusal(
                400, f"Invalid value at '{where}' (TYPE_MESSAGE), {_shown(value)}", where
            )
        properties: JsonDict = spec.get("properties") or {}
        extra = spec.get("additionalProperties")
        if not properties and extra is None:
            return None  # a free-form object (Struct, Any)
        for key, item in value.items():
            field = properties.get(key) or properties.get(_camel(key))
            if field is None and extra is None:
                if key == "@type":
                    continue
                return Refusal(
                    400,
                    f"Invalid JSON payload received. Unknown name \"{key}\" at '{where}': "
                    "Cannot find field.",
                    f"{where}.{key}",
                )
            wanted: JsonDict = field or extra or {}
            found = _value_problem(schemas, wanted, item, f"{where}.{key}", compute)
            if found is not None:
                return found
        return None
    if kind == "array":
        if not isinstance(value, list):
            return Refusal(400, f"Invalid value at '{where}' (TYPE_LIST), {_shown(value)}", where)
        for index, item in enumerate(value):
            found = _value_problem(
                schemas, spec.get("items") or {}, item, f"{where}[{index}]", compute
            )
            if found is not None:
                return found
        return None
    if kind == "any":
        return None
    problem = scalar_problem(spec, value, query_value=False)
    if problem is None:
        return None
    if problem == "TYPE_ENUM" and compute:
        # Compute Engine's enums are strings to its front end; its own check words it.
        field = "resource." + where.split(".", 1)[1] if "." in where else where
        allowed = ", ".join(spec.get("enum") or [])
        return Refusal(
            400,
            f"Invalid value for field '{field}': '{value}'. Value must be one of [{allowed}].",
            field,
        )
    return Refusal(400, f"Invalid value at '{snake(where)}' ({problem}), {_shown(value)}", where)


def scalar_problem(spec: JsonDict, value: Any, *, query_value: bool) -> str | None:
    """The protobuf type the value does not fit, or None."""
    kind, form = spec.get("type"), spec.get("format")
    if kind == "boolean":
        # google-cloud-logging sends Python's ``True``, and Google's front end takes it.
        fits = str(value).lower() in ("true", "false") if query_value else isinstance(value, bool)
        return None if fits else "TYPE_BOOL"
    if kind == "integer" or form in ("int64", "uint64", "int32", "uint32"):
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if not _INT.match(text) or (form and form.startswith("u") and text.startswith("-")):
            return "TYPE_INT64" if form in ("int64", "uint64") else "TYPE_INT32"
        return None
    if kind == "number":
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if fits or _NUMBER.match(str(value)) else "TYPE_DOUBLE"
    if kind == "string":
        if spec.get("enum"):
            # Numbers are enum values to a protobuf JSON parser; which number is
            # which name the document does not say, so any number is let through.
            if isinstance(value, int) and not isinstance(value, bool) and not query_value:
                return None
            return None if value in spec["enum"] else "TYPE_ENUM"
        return None if isinstance(value, str) else "TYPE_STRING"
    return None


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def snake(path: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), path)


def _shown(value: Any) -> str:
    return json.dumps(value)[:200]
