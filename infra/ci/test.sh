#!/bin/bash
# Cloud Build step: the whole suite, with the Firestore and Pub/Sub emulators.
set -euo pipefail
apt-get update -qq && apt-get install -y -qq make python3-venv openjdk-17-jre-headless \
  google-cloud-cli-firestore-emulator google-cloud-cli-pubsub-emulator >/dev/null
# CI has Chromium (`make tools`): its dashboard test fails rather than skips without it.
SPOTLINE_REQUIRE_BROWSER=1 make test
