#!/usr/bin/env bash
# The steps of the gpulint GitHub Action (action.yml at the repository root), one per argument:
#
#   install  pip-install gpulint: $GPULINT_INSTALL, pip's arguments (a requirement, a path, flags),
#            else the action's own source ($GITHUB_ACTION_PATH); `none` uses the gpulint on PATH
#   check    gpulint check $GPULINT_PATHS $GPULINT_ARGS --format sarif -o $GPULINT_SARIF; its exit
#            code goes to the step's outputs, not to the step, so the SARIF is uploaded either way;
#            where the check fails, the log gets the text report (what failed and why)
#   verdict  exits with the check's exit code ($GPULINT_EXIT_CODE): 0 passed, 1 findings at or
#            above --fail-on or a gate (--max-partitions, --fail-on-cpu-fallback), 2 bad input
#
# The upload (github/codeql-action/upload-sarif) runs between check and verdict, in action.yml.
# Outside GitHub the outputs go to $GITHUB_OUTPUT where it is set; tests/test_action.py runs the
# steps so on a sample model.
set -euo pipefail

output() { echo "$1=$2" >>"${GITHUB_OUTPUT:-/dev/null}"; }

case "${1:-}" in
install)
    if [ "${GPULINT_INSTALL:-}" = none ]; then
        command -v gpulint >/dev/null || { echo "::error::gpulint: install is 'none' but no gpulint is on PATH"; exit 2; }
    else
        read -r -a spec <<<"${GPULINT_INSTALL:-}"
        if [ "${#spec[@]}" -eq 0 ]; then
            spec=("${GITHUB_ACTION_PATH:?GITHUB_ACTION_PATH, the folder of the action, is not set}")
        fi
        python -m pip install --disable-pip-version-check "${spec[@]}"
    fi
    gpulint --version
    ;;
check)
    read -r -a paths <<<"${GPULINT_PATHS:-.}"
    read -r -a args <<<"${GPULINT_ARGS:-}"
    sarif=${GPULINT_SARIF:-gpulint.sarif}
    mkdir -p "$(dirname "$sarif")"
    code=0
    gpulint check "${paths[@]}" ${args[@]+"${args[@]}"} --format sarif --output "$sarif" || code=$?
    if [ "$code" -ne 0 ] && [ "$code" -ne 2 ]; then
        gpulint check "${paths[@]}" ${args[@]+"${args[@]}"} --format text || true
    fi
    output exit-code "$code"
    if [ -s "$sarif" ]; then
        output sarif-file "$sarif"
    fi
    echo "gpulint check: exit $code, SARIF in $sarif"
    ;;
verdict)
    code=${GPULINT_EXIT_CODE:-}
    case "$code" in
    0) echo "gpulint check passed" ;;
    1) echo "::error::gpulint check failed: findings at or above --fail-on, or a gate (see the check step's log)" ;;
    2) echo "::error::gpulint check could not check every model: bad input or usage (see the check step's log)" ;;
    *) echo "::error::gpulint check did not run"; code=2 ;;
    esac
    exit "$code"
    ;;
*)
    echo "usage: $0 install|check|verdict" >&2
    exit 2
    ;;
esac
