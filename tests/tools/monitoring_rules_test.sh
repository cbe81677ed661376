#!/usr/bin/env bash
# promtool on the monitoring bundle (tools/monitoring/): the rules file loads, and its unit tests
# on synthetic series (noded_rules_test.yml) pass: each alert fires where it should and stays
# silent on a healthy neighbour, each recording rule computes what its name says.
# Exit 0 pass, 1 fail, 77 skipped (no promtool: Debian package prometheus).
set -uo pipefail
dir=${1:?usage: monitoring_rules_test.sh MONITORING_DIR}
if ! command -v promtool >/dev/null; then
  echo "SKIP: promtool not installed (Debian package prometheus; tools/install-deps.sh)"
  exit 77
fi
cd "$dir" || exit 1
promtool check rules noded_rules.yml || exit 1
promtool test rules noded_rules_test.yml || exit 1
echo PASS
