"""What spotline takes, printed: the job spec's JSON Schema and every setting."""

from __future__ import annotations

import argparse
import json
import os


def schema(args: argparse.Namespace) -> int:
    from spotline.shared.domain.spec import JobSpec

    print(json.dumps(JobSpec.model_json_schema(), indent=2))
    return 0


def settings(args: argparse.Namespace) -> int:
    """Print every setting as the other commands would read it here."""
    from spotline.infra.cli.report import settings_table
    from spotline.infra.client.connection import where
    from spotline.shared.settings import load

    env, config_file, source = where(args.workdir)
    loaded = load({**os.environ, **(env or {})}, config_file=config_file)
    print(f"settings from {source}")
    print(settings_table(loaded))
    return 0
