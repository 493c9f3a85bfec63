#!/usr/bin/env bash
# Run a command -- by default the whole test suite -- with every core kept busy, as on a
# loaded CI machine: one spinning process per core (LOAD_PROCS=N for another count), all
# stopped when the command ends, however it ends. A test that assumed a schedule (a sleep
# standing in for an event, a tight wall-clock bound) fails here first.
#
#   tests/load.sh                                     # the whole suite under load
#   tests/load.sh python -m pytest -q tests/e2e       # any command
#   LOAD_PROCS=4 tests/load.sh ...                    # four spinners, whatever the cores
#
# The command's exit status is the script's. The spinners' pids are in LOAD_PIDS for it.
set -uo pipefail
cd "$(dirname "$0")/.."
procs="${LOAD_PROCS:-$(nproc)}"
case "$procs" in
  ''|*[!0-9]*)
    echo "tests/load.sh: LOAD_PROCS must be a whole number of processes, got '$procs' (e.g. LOAD_PROCS=2)" >&2
    exit 2 ;;
esac
if [ "$#" -eq 0 ]; then
  python=python3
  [ -x .venv/bin/python ] && python=.venv/bin/python
  set -- "$python" -m pytest -q -p no:cacheprovider
fi
spinners=()
stop() {
  [ "${#spinners[@]}" -eq 0 ] && return
  kill "${spinners[@]}" 2>/dev/null
  wait "${spinners[@]}" 2>/dev/null
  spinners=()
}
command=""
end() {  # interrupted: the command, then the spinners (the EXIT trap)
  [ -n "$command" ] && kill -TERM "$command" 2>/dev/null
  exit "$1"
}
trap stop EXIT
trap 'end 130' INT
trap 'end 143' TERM
for _ in $(seq "$procs"); do
  ( trap - EXIT INT TERM; while :; do :; done ) &
  spinners+=("$!")
done
export LOAD_PIDS="${spinners[*]}"
echo "tests/load.sh: $procs spinning process(es) (pids ${LOAD_PIDS:-none}) while: $*" >&2
started=$SECONDS
"$@" &  # in the background, so that a signal to this script is handled at once
command=$!
wait "$command"
status=$?
command=""
stop
echo "tests/load.sh: exit status $status after $((SECONDS - started)) s under load" >&2
exit "$status"
