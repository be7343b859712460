"""What spotline takes, printed: the job spec's JSON Schema and every setting."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


def schema(args: argparse.Namespace) -> int:
    from spotline.shared.domain.spec import JobSpec

    print(json.dumps(JobSpec.model_json_schema(), indent=2))
    return 0


def settings(args: argparse.Namespace) -> int:
    """Print every setting as the other commands would read it here."""
    from spotline.infra.cli.report import settings_table
    from spotline.infra.cli.tables import show
    from spotline.infra.client.connection import where
    from spotline.shared.settings import load

    env, config_file, source = where(args.workdir)
    loaded = load({**os.environ, **(env or {})}, config_file=config_file)
    if args.json:
        from spotline.infra.cli.output import print_json
        from spotline.infra.cli.report import settings_rows

        keys = ("setting", "variable", "value", "from", "description")
        rows = [dict(zip(keys, row, strict=True)) for row in settings_rows(loaded)]
        print_json({"source": source, "settings": rows})
        return 0
    print(f"settings from {source}")
    show(settings_table(loaded))
    return 0


# The reference pages of the documentation site, rendered from the
# declarations themselves (docs/hooks.py puts each where its page says), so
# the docs cannot drift from the code.


def spec_markdown() -> str:
    """The job spec's fields as a Markdown table, from the pydantic model."""
    from spotline.shared.domain.spec import JobSpec

    rows = []
    for name, field in JobSpec.model_fields.items():
        alias = field.alias or name
        required = "yes" if field.is_required() else ""
        rows.append([f"`{alias}`", required, _default(field), field.description or ""])
    return _markdown(["field", "required", "default", "what it is"], rows)


def settings_markdown() -> str:
    """Every setting, its variable, default and meaning, from ``Settings``."""
    from spotline.shared.settings import Settings, variables

    rows = []
    for name, field in Settings.model_fields.items():
        names = ", ".join(f"`{variable}`" for variable in variables(name))
        rows.append([f"`{name}`", names, _default(field), field.description or ""])
    return _markdown(["setting", "variable", "default", "what it does"], rows)


def cli_markdown() -> str:
    """Every command's usage and options, from the parser the CLI runs."""
    from spotline.infra.cli.parser import build

    parser = build()
    parts = ["```text", parser.format_help().rstrip(), "```"]
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for name, command in getattr(action, "choices", {}).items():
            command.prog = f"spotline {name}"
            usage = command.format_help().rstrip()
            parts += [f"### `spotline {name}`", "", "```text", usage, "```"]
    return "\n".join(parts)


def events_markdown() -> str:
    """Each message a VM or a user sends, and its fields, from the contract."""
    from pydantic import BaseModel

    from spotline.shared.contract import events

    parts = []
    for name in sorted(dir(events)):
        model = getattr(events, name)
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or name.startswith("_"):
            continue
        if model.__module__ != events.__name__ or not (model.__doc__ or "").strip():
            continue
        schema = model.model_json_schema()
        required = set(schema.get("required", []))
        rows = [
            [f"`{field}`", "yes" if field in required else "", _schema_type(declared)]
            for field, declared in schema["properties"].items()
        ]
        doc = " ".join((model.__doc__ or "").split())
        parts += [f"### `{name}`", "", doc, "", _markdown(["field", "required", "type"], rows), ""]
    return "\n".join(parts)


def _schema_type(schema: dict[str, Any]) -> str:
    """A field's type as its JSON Schema says it, short: ``integer``,
    ``string (date-time)``, ``"epoch"``, ``list of string``, ``X or null``."""
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " or ".join(json.dumps(value) for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_schema_type(option) for option in schema["anyOf"])
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"list of {_schema_type(schema.get('items', {}))}"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return kind


def _default(field: FieldInfo) -> str:
    return "" if field.is_required() else _shown(field.get_default(call_default_factory=True))


def _shown(value: object) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "" if value is None else f"`{json.dumps(value)}`"
    text = value.value if hasattr(value, "value") else value
    try:
        return f"`{json.dumps(text)}`"
    except TypeError:
        return f"`{text}`"


def _markdown(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)
