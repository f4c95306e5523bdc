#!/bin/bash
# commscope Slurm prolog: start the job's commscope collector on this node (and, on the job's
# first node, the job's aggregator) as systemd units.
#
# Install: slurm.conf `Prolog=/etc/slurm/prolog.d/commscope.sh` (or call it from your prolog),
# with `PrologFlags=Alloc` so it runs on every node at allocation, before the first step;
# deploy/systemd/commscope-{collector,aggregator}@.service installed on every node.
#
# What it does, as root, for job J of user U on node N:
#   1. creates the node-local trace folder $COMMSCOPE_TRACE_ROOT/J (owned by U, mode 0700);
#      the training job must write its profiler traces there (TorchTitan:
#      --job.dump_folder and --profiling.save_traces_folder so that iteration_N/ lands in it);
#   2. writes /etc/commscope/J.env (see deploy/systemd/example.env): the watch folder, the
#      aggregator endpoint tcp://FIRST_NODE:5555, the node name, and for the aggregator
#      --expect-nodes (the number of nodes of the job) and --idle-timeout;
#   3. on the first node of the job (the first name of `scontrol show hostnames`), starts
#      commscope-aggregator@J; on every node, starts commscope-collector@J.
# The epilog (epilog.sh) stops them; stopping the collector is what sends end-of-run.
#
# Why systemd units and not a nohup'd process: systemd gives restart on failure, a bounded
# SIGTERM-then-SIGKILL stop, the persistent state folder, hardening and the journal; the
# process is not in the job's cgroup, so Slurm's own kill at job end does not cut the drain.
#
# Monitoring must never cost a job: a prolog that exits non-zero drains the node and requeues
# the job, so every failure here is logged and the script exits 0 anyway.
#
# Site settings: /etc/commscope/slurm.conf (a bash fragment of VAR=value lines) may set the
# COMMSCOPE_* variables below; the defaults are the values after `:=`.

set -u
set -o pipefail
# Whatever ends this script (even `exit 3` in the site settings), its status is 0.
trap 'exit 0' EXIT

# slurmd gives the prolog a minimal environment; keep what is there first (tests put stubs there).
PATH="${PATH:+$PATH:}/usr/sbin:/usr/bin:/sbin:/bin"
export PATH

COMMSCOPE_SLURM_CONF="${COMMSCOPE_SLURM_CONF:-/etc/commscope/slurm.conf}"
if [[ -r "$COMMSCOPE_SLURM_CONF" ]]; then
    # shellcheck source=/dev/null
    . "$COMMSCOPE_SLURM_CONF"
fi
: "${COMMSCOPE_ENABLE:=1}"                          # 0: do nothing
: "${COMMSCOPE_ENV_DIR:=/etc/commscope}"            # where the units read JOBID.env
: "${COMMSCOPE_TRACE_ROOT:=/var/tmp/commscope}"     # node-local; the job writes to ROOT/JOBID
: "${COMMSCOPE_AGGREGATOR_HOST:=}"                  # empty: the job's first node runs it
: "${COMMSCOPE_PORT:=5555}"                         # aggregator ZeroMQ port
: "${COMMSCOPE_METRICS_PORT:=9464}"                 # aggregator /metrics port
: "${COMMSCOPE_IDLE_TIMEOUT:=1800}"                 # aggregator backstop, seconds
: "${COMMSCOPE_COLLECT_ARGS:=}"                     # e.g. "--poll" on NFS/Lustre
: "${COMMSCOPE_AGGREGATE_ARGS:=}"                   # e.g. "--config /etc/commscope/x.toml"
: "${COMMSCOPE_START_TIMEOUT:=30}"                  # seconds for each `systemctl start`

log() {
    echo "commscope-prolog: $*" >&2
    logger -t commscope-prolog -- "$*" 2>/dev/null || true
}

# The nodes of the job, one a line, in Slurm's order.
job_nodes() {
    scontrol show hostnames "${SLURM_JOB_NODELIST:-}"
}

# Write the env file through a temporary file and a rename, so a unit never reads half of it.
write_env() {
    local file="$1" tmp
    shift
    tmp="$(mktemp "${file}.XXXXXX")" || return 1
    if ! printf '%s\n' "$@" >"$tmp" || ! chmod 0644 "$tmp" || ! mv -f "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
}

start_unit() {
    if ! timeout "$COMMSCOPE_START_TIMEOUT" systemctl start "$1"; then
        log "could not start $1 (see: journalctl -u $1)"
        return 1
    fi
}

main() {
    [[ "$COMMSCOPE_ENABLE" == 1 ]] || return 0
    local job="${SLURM_JOB_ID:-}" user="${SLURM_JOB_USER:-}"
    if [[ ! "$job" =~ ^[0-9]+$ ]]; then
        log "no usable SLURM_JOB_ID ('$job'): nothing to do"
        return 0
    fi

    local nodes first count node
    if ! nodes="$(job_nodes)" || [[ -z "$nodes" ]]; then
        log "job $job: cannot list the job's nodes (scontrol): commscope not started"
        return 1
    fi
    first="${nodes%%$'\n'*}"
    count="$(grep -c . <<<"$nodes")"
    node="${SLURMD_NODENAME:-$(hostname -s)}"
    local host="${COMMSCOPE_AGGREGATOR_HOST:-$first}"
    local name_re='^[A-Za-z0-9._-]+$'
    if [[ ! "$node" =~ $name_re || ! "$host" =~ $name_re ]]; then
        log "job $job: unusable node name '$node' or aggregator host '$host'"
        return 1
    fi

    local watch="$COMMSCOPE_TRACE_ROOT/$job"
    if ! mkdir -p "$watch" || ! chmod 0700 "$watch" \
        || { [[ -n "$user" ]] && ! chown "$user:" "$watch"; }; then
        log "job $job: cannot prepare the trace folder $watch"
        return 1
    fi

    mkdir -p "$COMMSCOPE_ENV_DIR" || return 1
    if ! write_env "$COMMSCOPE_ENV_DIR/$job.env" \
        "# written by the commscope Slurm prolog for job $job; removed by the epilog" \
        "COMMSCOPE_WATCH_DIR=$watch" \
        "COMMSCOPE_AGGREGATOR=tcp://$host:$COMMSCOPE_PORT" \
        "COMMSCOPE_NODE=$node" \
        "COMMSCOPE_COLLECT_ARGS=\"$COMMSCOPE_COLLECT_ARGS\"" \
        "COMMSCOPE_LISTEN=tcp://0.0.0.0:$COMMSCOPE_PORT" \
        "COMMSCOPE_METRICS_PORT=$COMMSCOPE_METRICS_PORT" \
        "COMMSCOPE_AGGREGATE_ARGS=\"--expect-nodes $count --idle-timeout $COMMSCOPE_IDLE_TIMEOUT${COMMSCOPE_AGGREGATE_ARGS:+ $COMMSCOPE_AGGREGATE_ARGS}\""
    then
        log "job $job: cannot write $COMMSCOPE_ENV_DIR/$job.env"
        return 1
    fi

    local status=0
    # The aggregator first, so the collectors' first connection finds it (they retry anyway).
    if [[ -z "$COMMSCOPE_AGGREGATOR_HOST" && "$node" == "$first" ]]; then
        start_unit "commscope-aggregator@$job.service" || status=1
    fi
    start_unit "commscope-collector@$job.service" || status=1
    [[ $status == 0 ]] && log "job $job: collector started on $node, aggregator tcp://$host:$COMMSCOPE_PORT"
    return "$status"
}

# main runs in a subshell: a shell error in it (a bad setting under `set -u`) ends only the
# subshell.
( main "$@" ) || log "job ${SLURM_JOB_ID:-?}: commscope setup incomplete; the job runs without it"
exit 0
