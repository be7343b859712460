#!/bin/bash
# Cloud Build step: the spotline wheel the VM image installs, into dist/.
set -euo pipefail
pip wheel --no-deps --wheel-dir dist .
