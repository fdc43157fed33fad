#!/bin/sh
# Copies the screenshots the README and docs show from the browser tests' output
# (test-output/screenshots, written by `screenshot()` in tests/browser/conftest.py) into
# docs/screenshots. `make screenshots` runs the browser tests first.
set -eu
missing=0
for shown in $(grep -ohE 'docs/screenshots/[A-Za-z0-9_.-]+\.png' README.md docs/*.md | sort -u); do
  taken="test-output/screenshots/$(basename "$shown")"
  if [ -f "$taken" ]; then
    cp "$taken" "$shown"
    echo "retaken: $shown"
  else
    echo "no browser test takes $shown (expected $taken)" >&2
    missing=1
  fi
done
exit $missing
