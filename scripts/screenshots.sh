#!/bin/sh
# Copies the screenshots the README and docs (docs/ui.md) show from the browser tests' output
# (test-output/screenshots, written by `screenshot()` in tests/browser/conftest.py) into
# docs/screenshots. `make screenshots` runs the browser tests first.
set -eu
missing=0
# README.md names them docs/screenshots/NAME.png, the pages in docs/ screenshots/NAME.png.
for name in $(grep -ohE '(^|[(/])screenshots/[A-Za-z0-9_.-]+\.png' README.md docs/*.md | sed 's|.*/||' | sort -u); do
  shown="docs/screenshots/$name"
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
