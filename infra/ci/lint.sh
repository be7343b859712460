#!/bin/bash
# Cloud Build step: the lint half of `make test` (ruff, mypy, import contracts).
set -euo pipefail
apt-get update -qq && apt-get install -y -qq make python3-venv >/dev/null
make lint
