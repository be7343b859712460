#!/bin/sh
# Build the spotline VM image in PROJECT with Packer. POSIX sh: Cloud Build
# runs it in the hashicorp/packer image, which has no bash and no Python.
# Usage: vm_image/build_image.sh PROJECT [ZONE]
#   SPOTLINE_WHEEL: the spotline wheel to install; built here when unset.
set -eu
project=${1:?usage: build_image.sh PROJECT [ZONE]}
zone=${2:-us-central1-a}
here=$(cd "$(dirname "$0")" && pwd)
wheel=${SPOTLINE_WHEEL:-}
if [ -z "$wheel" ]; then
  dist=$(mktemp -d)
  python3 -m pip wheel --no-deps --wheel-dir "$dist" "$here/.."
  wheel=$(ls "$dist"/spotline-*.whl)
fi
packer init "$here"
packer build \
  -var "project_id=$project" \
  -var "zone=$zone" \
  -var "spotline_wheel=$wheel" \
  "$here"
