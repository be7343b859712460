"""The one line a deploy or destroy reports per resource."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Change:
    """What a deploy or destroy did (or, in a dry run, would do) to one resource."""

    kind: str  # service, database, bucket, account, iam, sink, topic, function, ...
    name: str
    action: str  # created, updated, unchanged, granted, deleted, would create, ...
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind:<12}  {self.name:<28}  {self.action}" + (
            f": {self.detail}" if self.detail else ""
        )

    def as_record(self) -> dict[str, str]:
        """What ``--json`` prints of it: ``kind``, ``name``, ``action``, ``detail``."""
        return asdict(self)
