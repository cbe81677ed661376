#!/usr/bin/env bash
# Formats the project's C++ with .clang-format, or checks that it is formatted.
#   tools/format.sh           # rewrite files in place
#   tools/format.sh --check   # exit 1 and list the files that differ (what tools/test.sh runs)
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' 2>/dev/null || find . -name '*.cc' -o -name '*.h')
if [ "${1:-}" = "--check" ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from .clang-format (run tools/format.sh):"
    printf '  %s\n' "${bad[@]}"
    exit 1
  fi
  echo "format: ${#files[@]} files clean"
  exit 0
fi
clang-format -i "${files[@]}"
