#!/usr/bin/env bash
# The one spec table (session/spec_fields.hpp): docs/cli.md holds it verbatim; every flag it
# names is one `qload load` takes (its --help lists it), and every C name a member of
# qload_options or a function of qload/qload.h. (Python's keywords: python/tests/test_load.py.)
source "$(dirname "${BASH_SOURCE[0]}")/clean_env.sh"
set -euo pipefail
qload=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$qload" config --spec-fields > "$dir/code.md"
sed -n '/<!-- spec-table -->/,/<!-- \/spec-table -->/p' "$root/docs/cli.md" | sed '1d;$d' > "$dir/docs.md"
diff -u "$dir/docs.md" "$dir/code.md" || { echo "FAIL: docs/cli.md and the spec table disagree (regenerate with qload config --spec-fields)"; exit 1; }
"$qload" load --help > "$dir/help.txt"
header="$root/capi/include/qload/qload.h"
sed -n '/^typedef struct qload_options {/,/^} qload_options;/p' "$header" > "$dir/options.h"
bad=0
# Rows after the two header lines: | `field` | cli | c | python | what |
while IFS='|' read -r _ field cli c python _; do
  field=$(tr -d ' `' <<<"$field") cli=$(tr -d ' `' <<<"$cli") c=$(tr -d ' `' <<<"$c")
  if [ "$cli" != "-" ] && [ "$cli" != "PATH" ] && ! grep -qE -- "(^|[ ,])$cli([ ,=]|$)" "$dir/help.txt"; then
    echo "FAIL: spec field $field: \`qload load --help\` has no $cli"; bad=1
  fi
  if [ "$c" != "-" ]; then
    if [[ "$c" == qload_* ]]; then
      grep -qE "QLOAD_API .*\\b$c\\(" "$header" || { echo "FAIL: spec field $field: qload.h has no function $c"; bad=1; }
    else
      grep -qE "[ *]$c;" "$dir/options.h" || { echo "FAIL: spec field $field: qload_options has no member $c"; bad=1; }
    fi
  fi
done < <(tail -n +3 "$dir/code.md")
[ "$bad" -eq 0 ] && echo "spec fields ok: $(($(wc -l < "$dir/code.md") - 2)) fields, CLI and C"
exit "$bad"
