#!/bin/bash
# commscope Slurm epilog: stop the job's commscope collector on this node, gracefully, and on
# the node that runs the job's aggregator, let it finish its reports; then remove what the job
# left on the node.
#
# Install: slurm.conf `Epilog=/etc/slurm/epilog.d/commscope.sh` (or call it from your epilog).
# It runs as root on every node of the job when the job ends. The launcher is the prolog's
# (COMMSCOPE_LAUNCHER: systemd units, or direct processes with pid files; see prolog.sh).
#
# End of run: stopping the collector (`systemctl stop commscope-collector@J`, or SIGTERM to its
# pid) makes it send what is left, wait (at most --drain, 20 s from the prolog) for the
# acknowledgements, send end-of-run and exit; after COMMSCOPE_COLLECTOR_STOP_TIMEOUT it is
# killed (direct: SIGKILL). The aggregator (started with --expect-nodes = the job's node count)
# writes its final reports into $COMMSCOPE_REPORTS_DIR/J (/var/lib/commscope-reports/J) and
# exits by itself once every collector has said end-of-run; here we wait for that a bounded
# time, then stop it (SIGTERM: it writes the reports with what it has; SIGKILL after
# COMMSCOPE_AGGREGATOR_STOP_TIMEOUT).
#
# On the node that ran an aggregator, once it is done: its reports
# (/var/lib/commscope-reports/J, world-readable there, kept) are copied, as the job's user, to
# COMMSCOPE_REPORT_DEST (default ~USER/commscope/J; %u user, %j job id, %h home; a shard's go
# to a subfolder named after it), the folder task_prolog.sh announces to the job as
# COMMSCOPE_REPORT_DIR; and its Prometheus file_sd target file is removed.
#
# Then what the job left on the node goes: the job's env file, the collector's checkpoint, the
# aggregator's state (write-ahead log) once its reports are written, the direct launcher's pid
# files, and the node-local trace folder $COMMSCOPE_TRACE_ROOT/J (its files were sent and
# acknowledged). The trace folder and the aggregator's state are kept (and the log says so)
# when their daemon had to be killed or would not stop: then they are what is left of the run.
# The direct launcher's logs stay in $COMMSCOPE_LOG_DIR.
#
# Bound: the whole script ends within COMMSCOPE_EPILOG_TIMEOUT seconds (90 by default), all
# steps counted: each waits at most its own bound (collector 30 s, aggregator's end 25 s, its
# stop 20 s, the copy 10 s, each removal or query 5 s) and never past that deadline; a step
# with no time left is skipped and logged. The node stays COMPLETING at most that long (set
# Slurm's PrologEpilogTimeout above it, if at all).
#
# A failing epilog drains the node: whatever happens, this script exits 0.

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
: "${COMMSCOPE_EPILOG_TIMEOUT:=90}"             # the whole script, every step counted
: "${COMMSCOPE_COLLECTOR_STOP_TIMEOUT:=30}"    # > the collector's --drain (20 s)
: "${COMMSCOPE_AGGREGATOR_WAIT:=25}"           # for every node's collector to drain
: "${COMMSCOPE_AGGREGATOR_STOP_TIMEOUT:=20}"   # for the reports after SIGTERM
: "${COMMSCOPE_POLL_INTERVAL:=1}"
: "${COMMSCOPE_QUERY_TIMEOUT:=5}"              # each query or removal
: "${COMMSCOPE_STATE_ROOT:=/var/lib}"          # the units' StateDirectory root
: "${COMMSCOPE_REPORTS_DIR:=$COMMSCOPE_STATE_ROOT/commscope-reports}"  # the aggregator's --out parent
: "${COMMSCOPE_REPORT_DEST=%h/commscope/%j}"  # where the job's user finds them; empty: left
: "${COMMSCOPE_COPY_TIMEOUT:=10}"              # for copying the reports
: "${COMMSCOPE_FILE_SD_DIR:=/var/lib/commscope/file_sd}"
: "${COMMSCOPE_TRACE_ROOT:=/var/tmp/commscope}"  # as in prolog.sh
: "${COMMSCOPE_LAUNCHER:=auto}"                # as in prolog.sh
: "${COMMSCOPE_SYSTEMD_MARK:=/run/systemd/system}"

log() {
    echo "commscope-epilog: $*" >&2
    logger -t commscope-epilog -- "$*" 2>/dev/null || true
}

# Seconds step may take: $1, or what is left before the deadline if less (0: none left).
budget() {
    local left=$((DEADLINE - SECONDS))
    ((left < 0)) && left=0
    echo $(($1 < left ? $1 : left))
}

# `bounded SECONDS COMMAND...`: COMMAND under `timeout`, within the deadline; skipped (1) when
# no time is left.
bounded() {
    local bound
    bound="$(budget "$1")"
    shift
    if ((bound <= 0)); then
        log "job ${SLURM_JOB_ID:-?}: out of time (${COMMSCOPE_EPILOG_TIMEOUT}s): skipped $*"
        return 1
    fi
    timeout "$bound" "$@"
}

# Whether the prolog's launcher was systemd (COMMSCOPE_LAUNCHER; auto: when systemd runs).
by_systemd() {
    [[ "$COMMSCOPE_LAUNCHER" == systemd \
        || ("$COMMSCOPE_LAUNCHER" != direct && -d "$COMMSCOPE_SYSTEMD_MARK") ]]
}

unit() {
    echo "commscope-$1@$JOB.service"
}

# The --state folder of service $1 (collector, aggregator), as prolog.sh gives it.
state_dir() {
    [[ "$1" == collector ]] && echo "$COMMSCOPE_STATE_ROOT/commscope/$JOB" \
        || echo "$COMMSCOPE_STATE_ROOT/commscope-aggregator/$JOB"
}

# Direct launcher: the pid of service $1 while it runs (its command line names its state
# folder: a pid reused by another process, or a zombie, is not it).
pid_of() {
    local pid
    pid="$(cat "$COMMSCOPE_STATE_ROOT/commscope-run/$JOB/$1.pid" 2>/dev/null)" || return 1
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$(state_dir "$1")" || return 1
    echo "$pid"
}

# Whether service $1 (collector, aggregator) of the job runs.
is_active() {
    if by_systemd; then
        bounded "$COMMSCOPE_QUERY_TIMEOUT" systemctl is-active --quiet "$(unit "$1")"
    else
        pid_of "$1" >/dev/null
    fi
}

# Wait up to $2 seconds (within the deadline) for service $1 to end by itself; 0 if it did
# (seen ended before the time was up).
wait_inactive() {
    local deadline=$((SECONDS + $(budget "$2")))
    while ((SECONDS < deadline)); do
        is_active "$1" || return 0
        sleep "$COMMSCOPE_POLL_INTERVAL"
    done
    return 1
}

# Stop service $1 within $2 seconds; 0 if it ended after SIGTERM (drained, or its reports
# written), 1 if it had to be killed or would not stop.
stop_service() {
    local pid
    if by_systemd; then
        bounded "$2" systemctl stop "$(unit "$1")" && return 0
        log "job $JOB: stopping $(unit "$1") failed or took more than ${2}s"
        return 1
    fi
    pid="$(pid_of "$1")" || return 0
    kill -TERM "$pid" 2>/dev/null
    wait_inactive "$1" "$2" && return 0
    kill -KILL "$pid" 2>/dev/null
    log "job $JOB: the $1 (pid $pid) did not end ${2}s after SIGTERM: killed"
    return 1
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
    if bounded "$COMMSCOPE_COPY_TIMEOUT" runuser -u "$user" -- \
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

# Remove folder $1 (what $2 names), bounded.
remove() {
    [[ -e "$1" ]] || return 0
    bounded "$COMMSCOPE_QUERY_TIMEOUT" rm -rf -- "$1" || log "job $JOB: could not remove $2 $1"
}

# What the job left on the node; the trace folder ($1 = 1) and the aggregator's state ($2 = 1)
# only when their daemon ended by itself.
clean_up() {
    local traces="$1" aggregator_state="$2" collector aggregator
    collector="$(unit collector)" aggregator="$(unit aggregator)"
    if by_systemd; then
        bounded "$COMMSCOPE_QUERY_TIMEOUT" systemctl clean --what=state "$collector" >/dev/null 2>&1
        bounded "$COMMSCOPE_QUERY_TIMEOUT" systemctl reset-failed "$collector" "$aggregator" \
            >/dev/null 2>&1
    fi
    remove "$(state_dir collector)" "the collector's checkpoint"
    remove "$COMMSCOPE_STATE_ROOT/commscope-run/$JOB" "the pid files"
    if [[ "$aggregator_state" == 1 ]]; then
        remove "$(state_dir aggregator)" "the aggregator's state"
    else
        log "job $JOB: the aggregator's state $(state_dir aggregator) kept"
    fi
    if [[ "$traces" == 1 ]]; then
        remove "$COMMSCOPE_TRACE_ROOT/$JOB" "the trace folder"
    else
        log "job $JOB: the trace folder $COMMSCOPE_TRACE_ROOT/$JOB kept (the collector did not drain)"
    fi
    rm -f "$COMMSCOPE_ENV_DIR/$JOB.env"
}

main() {
    JOB="${SLURM_JOB_ID:-}"
    if [[ ! "$JOB" =~ ^[0-9]+$ ]]; then
        log "no usable SLURM_JOB_ID ('$JOB'): nothing to do"
        return 0
    fi
    if [[ ! "$COMMSCOPE_EPILOG_TIMEOUT" =~ ^[0-9]{1,4}$ ]]; then
        log "unusable COMMSCOPE_EPILOG_TIMEOUT '$COMMSCOPE_EPILOG_TIMEOUT': 90 s"
        COMMSCOPE_EPILOG_TIMEOUT=90
    fi
    local start="$SECONDS"
    DEADLINE=$((start + 10#$COMMSCOPE_EPILOG_TIMEOUT))
    local traces=1 aggregator_state=1

    # Stopping the collector is what sends end-of-run; it blocks until the drain is over.
    stop_service collector "$COMMSCOPE_COLLECTOR_STOP_TIMEOUT" || traces=0

    if is_active aggregator; then
        if wait_inactive aggregator "$COMMSCOPE_AGGREGATOR_WAIT"; then
            log "job $JOB: aggregator finished its reports"
        else
            log "job $JOB: aggregator still waiting after ${COMMSCOPE_AGGREGATOR_WAIT}s: stopping it"
            stop_service aggregator "$COMMSCOPE_AGGREGATOR_STOP_TIMEOUT" || aggregator_state=0
        fi
    fi

    if [[ -d "$COMMSCOPE_REPORTS_DIR/$JOB" ]]; then
        local shard
        shard="$(shard_of "$JOB")"
        copy_reports "$JOB" "${SLURM_JOB_USER:-}" "$shard"
        rm -f "$COMMSCOPE_FILE_SD_DIR/$JOB${shard:+-$shard}.json"
    fi
    clean_up "$traces" "$aggregator_state"
    log "job $JOB: epilog done in $((SECONDS - start))s"
    return 0
}

# main runs in a subshell: a shell error in it (a bad setting under `set -u`) ends only the
# subshell.
( main "$@" ) || log "job ${SLURM_JOB_ID:-?}: cleanup incomplete"
exit 0
