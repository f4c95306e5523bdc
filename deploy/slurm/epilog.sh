#!/bin/bash
# commscope Slurm epilog: stop the job's commscope collector on this node, gracefully, and on
# the node that runs the job's aggregator, let it finish its reports.
#
# Install: slurm.conf `Epilog=/etc/slurm/epilog.d/commscope.sh` (or call it from your epilog).
# It runs as root on every node of the job when the job ends.
#
# End of run: `systemctl stop commscope-collector@J` sends SIGTERM; the collector sends what is
# left, waits (bounded) for the acknowledgements, sends end-of-run and exits; systemd SIGKILLs
# it only after the unit's TimeoutStopSec. The aggregator (started with --expect-nodes = the
# job's node count) writes its final reports into /var/lib/commscope-reports/J and exits by
# itself once every collector has said end-of-run; here we wait for that a bounded time, then
# stop it (SIGTERM: it writes the reports with what it has).
#
# A failing epilog drains the node: whatever happens, this script exits 0. Every wait is
# bounded; the worst case is COMMSCOPE_COLLECTOR_STOP_TIMEOUT + COMMSCOPE_AGGREGATOR_WAIT +
# COMMSCOPE_AGGREGATOR_STOP_TIMEOUT seconds (about 9 minutes with the defaults), and only on the
# aggregator's node.

set -u
set -o pipefail
# Whatever ends this script (even `exit 3` in the site settings), its status is 0.
trap 'exit 0' EXIT

# Keep what is on PATH first (tests put stubs there); slurmd's own PATH is minimal.
PATH="${PATH:+$PATH:}/usr/sbin:/usr/bin:/sbin:/bin"
export PATH

COMMSCOPE_SLURM_CONF="${COMMSCOPE_SLURM_CONF:-/etc/commscope/slurm.conf}"
if [[ -r "$COMMSCOPE_SLURM_CONF" ]]; then
    # shellcheck source=/dev/null
    . "$COMMSCOPE_SLURM_CONF" || true
fi
: "${COMMSCOPE_ENV_DIR:=/etc/commscope}"
: "${COMMSCOPE_COLLECTOR_STOP_TIMEOUT:=180}"   # > the collector unit's TimeoutStopSec (150 s)
: "${COMMSCOPE_AGGREGATOR_WAIT:=240}"          # for every node's collector to drain
: "${COMMSCOPE_AGGREGATOR_STOP_TIMEOUT:=150}"  # > the aggregator unit's TimeoutStopSec (120 s)
: "${COMMSCOPE_POLL_INTERVAL:=2}"
: "${COMMSCOPE_QUERY_TIMEOUT:=10}"             # for `systemctl is-active`, `reset-failed`

log() {
    echo "commscope-epilog: $*" >&2
    logger -t commscope-epilog -- "$*" 2>/dev/null || true
}

is_active() {
    timeout "$COMMSCOPE_QUERY_TIMEOUT" systemctl is-active --quiet "$1" 2>/dev/null
}

stop_unit() {
    local unit="$1" bound="$2"
    if ! timeout "$bound" systemctl stop "$unit"; then
        log "stopping $unit failed or took more than ${bound}s"
    fi
}

# Wait up to $2 seconds for $1 to become inactive by itself; 0 if it did.
wait_inactive() {
    local unit="$1" deadline=$((SECONDS + $2))
    while is_active "$unit"; do
        if ((SECONDS >= deadline)); then
            return 1
        fi
        sleep "$COMMSCOPE_POLL_INTERVAL"
    done
}

main() {
    local job="${SLURM_JOB_ID:-}"
    if [[ ! "$job" =~ ^[0-9]+$ ]]; then
        log "no usable SLURM_JOB_ID ('$job'): nothing to do"
        return 0
    fi
    local collector="commscope-collector@$job.service"
    local aggregator="commscope-aggregator@$job.service"

    # Stopping the collector is what sends end-of-run; it blocks until the drain is over.
    stop_unit "$collector" "$COMMSCOPE_COLLECTOR_STOP_TIMEOUT"

    if is_active "$aggregator"; then
        if wait_inactive "$aggregator" "$COMMSCOPE_AGGREGATOR_WAIT"; then
            log "job $job: aggregator finished its reports"
        else
            log "job $job: aggregator still waiting after ${COMMSCOPE_AGGREGATOR_WAIT}s: stopping it"
            stop_unit "$aggregator" "$COMMSCOPE_AGGREGATOR_STOP_TIMEOUT"
        fi
    fi

    # The collector's checkpoint means nothing once the job is over: remove it (the
    # aggregator's state and reports stay). Forget failed instances so they do not pile up
    # over thousands of jobs. The trace folder is the user's: left for tmpfiles.d to age out.
    timeout "$COMMSCOPE_QUERY_TIMEOUT" systemctl clean --what=state "$collector" >/dev/null 2>&1
    timeout "$COMMSCOPE_QUERY_TIMEOUT" systemctl reset-failed "$collector" "$aggregator" >/dev/null 2>&1
    rm -f "$COMMSCOPE_ENV_DIR/$job.env"
    return 0
}

# main runs in a subshell: a shell error in it (a bad setting under `set -u`) ends only the
# subshell.
( main "$@" ) || log "job ${SLURM_JOB_ID:-?}: cleanup incomplete"
exit 0
