#!/usr/bin/env bash
# Lints intake/openapi.yaml with Redocly's CLI (pinned; npx caches it after the first
# run). The document refers to the mutation schema where intake serves it
# (v1/schemas/mutation.json, beside /openapi.yaml), so the lint runs on a copy laid
# out the same way, with models/mutation.schema.json in that place.
set -euo pipefail
REDOCLY_CLI_VERSION="${REDOCLY_CLI_VERSION:-2.11.1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/v1/schemas"
cp "$root/intake/openapi.yaml" "$root/intake/redocly.yaml" "$root/intake/.redocly.lint-ignore.yaml" "$tmp/"
cp "$root/models/mutation.schema.json" "$tmp/v1/schemas/mutation.json"
cd "$tmp"
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
exec npx --yes "@redocly/cli@$REDOCLY_CLI_VERSION" lint --config redocly.yaml --format stylish openapi.yaml
