#!/usr/bin/env bash
# Run the FinOps Foundation's focus-validator 2.2.1 (FOCUS 1.2 rule model) on core.cost_lines of
# one or more warehouses, and print the rules that fail. A development tool, not a dependency:
# it lives in a venv of its own, made on first use (needs PyPI once).
#
#   tools/focus_validate.sh WAREHOUSE.duckdb [...]          (make focus-validate)
#
# Env: FOCUS_VALIDATOR_VENV (default .focus-validator-venv), FOCUS_VALIDATOR_PYTHON (python3.12:
# the validator declares Python >= 3.12), PYTHON (the project's interpreter, for the export).
# Exit status: 0 when no root-column rule (<Column>-C-000-*) and no dataset rule
# (CostAndUsage-D-*) fails on any warehouse, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
# Absolute: the validator runs from inside its own site-packages (cd "$SITE" below).
VENV=$(realpath -m "${FOCUS_VALIDATOR_VENV:-.focus-validator-venv}")
VPY=${FOCUS_VALIDATOR_PYTHON:-python3.12}
PY=${PYTHON:-.venv/bin/python}
OUT=${FOCUS_VALIDATE_OUT:-.finops/focus-validate}
[ $# -ge 1 ] || { echo "usage: $0 WAREHOUSE.duckdb [...]" >&2; exit 2; }

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import focus_validator" 2>/dev/null; then
    echo "creating $VENV with focus-validator 2.2.1 ($VPY)"
    "$VPY" -m venv "$VENV"
    # pyarrow is unpinned by the validator, which pins numpy<2; pyarrow 21+ needs numpy 2.
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "focus-validator==2.2.1" "pyarrow<21"
fi
SITE=$("$VENV/bin/python" -c "import focus_validator, os; print(os.path.dirname(os.path.dirname(focus_validator.__file__)))")
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
status=0
for wh in "$@"; do
    name=$(basename "$(dirname "$wh")")-$(basename "$wh" .duckdb)
    "$PY" -m tools.export_focus "$wh" "$OUT/$name.parquet"
    (cd "$SITE" && "$VENV/bin/python" -m focus_validator.main --block-download --validate-version 1.2 \
        --rule-set-path focus_validator/rules --data-file "$OUT/$name.parquet" --show-violations) > "$OUT/$name.txt" 2>&1 || {
        echo "$wh: the validator did not finish, see $OUT/$name.txt"; status=1; continue; }
    summary=$(grep -m1 '^Total:' "$OUT/$name.txt" || true)
    failing=$(grep -o '^❌ [A-Za-z]*-[CD]-[0-9]*-[A-Z]' "$OUT/$name.txt" | cut -c5- || true)
    root=$(echo "$failing" | grep -E -- '-C-000-|^CostAndUsage-D-' || true)
    echo "$wh: $summary; failing root/dataset rules: $(echo $root | wc -w)"
    [ -z "$failing" ] || echo "$failing" | sed 's/^/    fails: /'
    [ -z "$root" ] || status=1
done
echo "full reports: $OUT"
exit $status
