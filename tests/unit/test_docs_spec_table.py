"""The job spec table (Submitting jobs) names every field a spec may carry, each with
its default: a field added to ``JobSpec`` without a row fails here."""

from __future__ import annotations

import re

from spotline.shared.domain.spec import JobSpec
from tests.doc_examples import section

PAGE = "docs/guides/submitting.md"


def spec_table() -> dict[str, str]:
    """Each field named in the first column of the job spec table, with the
    row's default column."""
    rows = [
        line.split("|")[1:3]
        for line in section(PAGE, "## The job spec").splitlines()
        if line.startswith("| `")
    ]
    return {
        name: default.strip() for names, default in rows for name in re.findall(r"`([^`]+)`", names)
    }


def test_every_spec_field_has_a_row_with_its_default() -> None:
    table = spec_table()
    fields = {field.alias or name for name, field in JobSpec.model_fields.items()}
    missing = sorted(fields - set(table) - {"$schema"})  # `$schema`: its own paragraph
    assert not missing, f"{PAGE}'s job spec table has no row for {missing}"
    assert all(table[name] for name in fields & set(table)), "a row without a default"
    assert not sorted(set(table) - fields), "a row for a field the spec does not have"
