#!/bin/bash
# commscope Slurm TaskProlog: tell each task of a job where commscope watches and reports.
#
# Install: slurm.conf `TaskProlog=/etc/slurm/task_prolog.d/commscope.sh` (or print its lines
# from your TaskProlog). slurmstepd runs it as the job's user before each task; every
# `export NAME=value` line it prints is set in the task's environment:
#   COMMSCOPE_TRACE_DIR   the folder the node's collector watches (made by prolog.sh): point
#                         the profiler there, e.g. TorchTitan
#                         --profiling.save_traces_folder="$COMMSCOPE_TRACE_DIR" (an absolute
#                         path: iteration_N/ lands in it);
#   COMMSCOPE_REPORT_DIR  where epilog.sh copies the job's final reports (text and JSON) once
#                         the aggregator has written them.
# Nothing is printed for a job commscope does not watch (no trace folder on this node).
# It never fails the task: whatever happens, it exits 0.

set -u
trap 'exit 0' EXIT
PATH="${PATH:+$PATH:}/usr/bin:/bin"

COMMSCOPE_SLURM_CONF="${COMMSCOPE_SLURM_CONF:-/etc/commscope/slurm.conf}"
if [[ -r "$COMMSCOPE_SLURM_CONF" ]]; then
    # shellcheck source=/dev/null
    . "$COMMSCOPE_SLURM_CONF" || true
fi
: "${COMMSCOPE_ENABLE:=1}"
: "${COMMSCOPE_TRACE_ROOT:=/var/tmp/commscope}"     # as in prolog.sh
: "${COMMSCOPE_REPORT_DEST=%h/commscope/%j}"      # as in epilog.sh

main() {
    local job="${SLURM_JOB_ID:-}" user="${SLURM_JOB_USER:-${USER:-}}" home dest
    [[ "$COMMSCOPE_ENABLE" == 1 && "$job" =~ ^[0-9]+$ ]] || return 0
    [[ -d "$COMMSCOPE_TRACE_ROOT/$job" ]] || return 0
    echo "export COMMSCOPE_TRACE_DIR=$COMMSCOPE_TRACE_ROOT/$job"
    [[ -n "$COMMSCOPE_REPORT_DEST" && -n "$user" ]] || return 0
    home="$(getent passwd "$user" | cut -d: -f6)"
    dest="$COMMSCOPE_REPORT_DEST"
    [[ "$dest" == *%h* && -z "$home" ]] && return 0
    dest="${dest//%u/$user}" dest="${dest//%j/$job}" dest="${dest//%h/$home}"
    [[ "$dest" == *$'\n'* ]] || echo "export COMMSCOPE_REPORT_DIR=$dest"
}

( main )
exit 0
