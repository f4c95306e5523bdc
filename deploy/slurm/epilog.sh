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
# On the node that ran an aggregator, once it is done: its reports
# (/var/lib/commscope-reports/J, world-readable there) are copied, as the job's user, to
# COMMSCOPE_REPORT_DEST (default ~USER/commscope/J; %u user, %j job id, %h home; a shard's go
# to a subfolder named after it), the folder task_prolog.sh announces to the job as
# COMMSCOPE_REPORT_DIR; and its Prometheus file_sd target file is removed.
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
: "${COMMSCOPE_REPORTS_DIR:=/var/lib/commscope-reports}"  # the aggregator unit's --out parent
: "${COMMSCOPE_REPORT_DEST=%h/commscope/%j}"  # where the job's user finds them; empty: left
: "${COMMSCOPE_COPY_TIMEOUT:=120}"             # for copying the reports
: "${COMMSCOPE_FILE_SD_DIR:=/var/lib/commscope/file_sd}"

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

# COMMSCOPE_REPORT_DEST for job $1 of user $2: %u the user, %j the job id, %h the home.
report_dest() {
    local home dest="$COMMSCOPE_REPORT_DEST"
    home="$(getent passwd "$2" | cut -d: -f6)"
    [[ "$dest" == *%h* && -z "$home" ]] && return 1
    dest="${dest//%u/$2}" dest="${dest//%j/$1}" dest="${dest//%h/$home}"
    echo "$dest"
}

# The reports of job $1 (shard $3, if any), copied as its user $2: root may not write to a
# root-squashed share, and the copies are the user's own.
copy_reports() {
    local job="$1" user="$2" shard="$3" src="$COMMSCOPE_REPORTS_DIR/$1" dest
    [[ -d "$src" ]] || return 0
    if [[ -z "$COMMSCOPE_REPORT_DEST" || ! "$user" =~ ^[a-z_][a-z0-9_.-]*[$]?$ ]] \
        || ! dest="$(report_dest "$job" "$user")"; then
        log "job $job: reports left in $src on $(hostname -s) (world-readable)"
        return 0
    fi
    dest="$dest${shard:+/$shard}"
    # shellcheck disable=SC2016  # $1 and $2 are the inner bash's arguments
    if timeout "$COMMSCOPE_COPY_TIMEOUT" runuser -u "$user" -- \
        bash -c 'mkdir -p -- "$1" && cp -r -- "$2"/. "$1"/' _ "$dest" "$src"; then
        log "job $job: reports copied to $dest"
    else
        log "job $job: cannot copy the reports to $dest as $user; they stay in $src"
    fi
}

# The --shard of this node's aggregator, from the job's env file (empty: none).
shard_of() {
    local line
    line="$(grep -s '^COMMSCOPE_AGGREGATE_ARGS=' "$COMMSCOPE_ENV_DIR/$1.env")"
    [[ "$line" =~ --shard\ ([A-Za-z0-9_.:@-]+) ]] && echo "${BASH_REMATCH[1]}"
    return 0
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

    if [[ -d "$COMMSCOPE_REPORTS_DIR/$job" ]]; then
        local shard
        shard="$(shard_of "$job")"
        copy_reports "$job" "${SLURM_JOB_USER:-}" "$shard"
        rm -f "$COMMSCOPE_FILE_SD_DIR/$job${shard:+-$shard}.json"
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
