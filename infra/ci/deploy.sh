#!/bin/bash
# Cloud Build step: `spotline deploy` into PROJECT, after lint, tests and the image.
# Usage: infra/ci/deploy.sh PROJECT REGION STORAGE_ROOT [SUBMITTERS]
#   SUBMITTERS: comma-separated principals who may publish jobs (user:..., group:...).
# Cloud Build's service account deploys: it needs the rights docs/operations/deploying.md's
# prerequisites name (enable APIs, create service accounts, set IAM policies).
set -euo pipefail
project=${1:?usage: deploy.sh PROJECT REGION STORAGE_ROOT [SUBMITTERS]}
region=${2:?usage: deploy.sh PROJECT REGION STORAGE_ROOT [SUBMITTERS]}
root=${3:?usage: deploy.sh PROJECT REGION STORAGE_ROOT [SUBMITTERS]}
python3 -m venv /tmp/deploy-venv
/tmp/deploy-venv/bin/pip install --quiet --disable-pip-version-check .
SPOTLINE_SUBMITTERS=${4:-} /tmp/deploy-venv/bin/spotline deploy \
  --project "$project" --region "$region" --storage-root "$root"
