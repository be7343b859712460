"""The README's job spec table names every field a spec may carry, each with
its default: a field added to ``JobSpec`` without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

from spotline.shared.domain.spec import JobSpec

README = Path(__file__).resolve().parents[1] / "README.md"


def spec_table() -> dict[str, str]:
    """Each field named in the first column of the job spec table, with the
    row's default column."""
    readme = README.read_text()
    start = readme.index("### The job spec")
    rows = [
        line.split("|")[1:3]
        for line in readme[start : readme.index("\n#", start + 1)].splitlines()
        if line.startswith("| `")
    ]
    return {
        name: default.strip() for names, default in rows for name in re.findall(r"`([^`]+)`", names)
    }


def test_every_spec_field_has_a_row_with_its_default() -> None:
    table = spec_table()
    fields = {field.alias or name for name, field in JobSpec.model_fields.items()}
    missing = sorted(fields - set(table) - {"$schema"})  # `$schema`: its own paragraph
    assert not missing, f"the README's job spec table has no row for {missing}"
    assert all(table[name] for name in fields & set(table)), "a row without a default"
    assert not sorted(set(table) - fields), "a row for a field the spec does not have"
