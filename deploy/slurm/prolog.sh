#!/bin/bash
# commscope Slurm prolog: start the job's commscope collector on this node (and, on the job's
# first node, the job's aggregator), as systemd units or as detached processes.
#
# Install: slurm.conf `Prolog=/etc/slurm/prolog.d/commscope.sh` (or call it from your prolog),
# with `PrologFlags=Alloc` so it runs on every node at allocation, before the first step.
#
# What it does, as root, for job J of user U on node N:
#   1. creates the node-local trace folder $COMMSCOPE_TRACE_ROOT/J (owned by U, mode 0700);
#      the training job must write its profiler traces there (TorchTitan:
#      --job.dump_folder and --profiling.save_traces_folder so that iteration_N/ lands in it);
#      (the TaskProlog, task_prolog.sh, exports it to the job's tasks as COMMSCOPE_TRACE_DIR);
#   2. writes /etc/commscope/J.env (see deploy/systemd/example.env): the watch folder, the
#      aggregator endpoint tcp://FIRST_NODE:PORT, the node name, and for the aggregator
#      --expect-nodes (the number of nodes of the job) and --idle-timeout;
#   3. on the first node of the job (the first name of `scontrol show hostnames`), starts the
#      job's aggregator and writes a Prometheus file_sd target file for its /metrics
#      ($COMMSCOPE_FILE_SD_DIR/J.json, J-SHARD.json with shards: put the folder where
#      Prometheus reads it, e.g. a shared filesystem; the epilog removes it); on every node,
#      starts the job's collector.
# Launchers (COMMSCOPE_LAUNCHER): `systemd` starts commscope-{aggregator,collector}@J
# (deploy/systemd, installed on every node); `direct` starts `commscope aggregate|collect`
# detached (setsid, no terminal, stdin/stdout/stderr away from slurmd) with the units' flags:
# state in $COMMSCOPE_STATE_ROOT/commscope{,-aggregator}/J and reports in
# $COMMSCOPE_REPORTS_DIR/J as with the units, pid files (and the collector's copy of its secret
# key) in $COMMSCOPE_STATE_ROOT/commscope-run/J, logs in $COMMSCOPE_LOG_DIR/J-{collector,aggregator}.log.
# `auto` (the default) is systemd when systemd runs the node (/run/systemd/system exists),
# else direct. Direct daemons are outside the job only when the prolog is (no
# PrologFlags=Contain, which puts it in the job's cgroup; use systemd there).
# Ports are per job, a function of the job id alone, so every node computes the same one with
# no shared file to wait for and two jobs whose first node is the same never collide: the
# ZeroMQ port is COMMSCOPE_PORT_BASE + J mod COMMSCOPE_PORT_RANGE and /metrics the same offset
# from COMMSCOPE_METRICS_PORT_BASE (defaults 20000 and 24500, range 4500: job 4242 gets 24242
# and 28742; the blocks 20000-24499 and 24500-28999). Both blocks stay clear of
# COMMSCOPE_RESERVED_PORTS (29400-29600: torchrun's rendezvous 29400 and MASTER_PORT / c10d
# TCPStore 29500) and below the start of the node's ephemeral range (read from
# /proc/sys/net/ipv4/ip_local_port_range, 32768 by default), where the kernel picks the
# source ports of outgoing connections (NCCL's and Gloo's among them). A port in the reserved
# span or the ephemeral range (set by a site's bases or fixed ports) is never bound: the
# aggregator is not started and the log says which setting to change. Before binding, the
# prolog looks for a listener on the port on every address of the node (IPv4 and IPv6, from
# /proc/net/tcp and tcp6): two jobs collide only if both run with the same first node and ids
# equal modulo the range, and then the second aggregator is not started (logged).
# `prolog.sh --ports J...` prints each job's "J ZMQ_PORT METRICS_PORT" (or "J refused") and
# does nothing else. A fixed COMMSCOPE_PORT / COMMSCOPE_METRICS_PORT overrides it (with
# COMMSCOPE_AGGREGATOR_HOST, the central aggregator's port: 5555 unless set).
# Shards (COMMSCOPE_SHARD_NODES=K, for jobs too large for one aggregator): the job's nodes in
# blocks of K, in Slurm's order; each block's first node runs an aggregator for the block
# (--shard s0, s1, ...; --expect-nodes the block's size) and the block's collectors point at
# it. Their metrics meet in Prometheus and VictoriaMetrics (deploy/README.md). With
# COMMSCOPE_RANKS_PER_NODE=G as well, a block's aggregator owns ranks first*G … (first+K)*G-1
# (--ranks: it completes a window once those have each a file), which holds when the job's
# node ranks follow Slurm's node order (srun one task a GPU, or torchrun --node_rank=$SLURM_NODEID).
# The epilog (epilog.sh) stops them; stopping the collector is what sends end-of-run. The
# collector gets `--drain $COMMSCOPE_DRAIN` (20 s) and the aggregator `--linger
# $COMMSCOPE_LINGER` (15 s: one more scrape at Prometheus' default interval) so that both end
# within the epilog's waits.
#
# Keys (CurveZMQ), in $COMMSCOPE_KEYS_DIR (/etc/commscope/keys, where the units load them from):
#   - aggregator.key and aggregator.key_secret: the site's aggregator pair, the same on every
#     node (any node may run a job's aggregator). Made once by the admin:
#     `commscope keys --out /etc/commscope/keys --name aggregator`, then copied to every node.
#   - node.key_secret (0600) and node.key: this node's own pair. The prolog makes it on a node's
#     first job (`commscope keys --name NODE`) and publishes node.key as NODE.key into
#     $COMMSCOPE_ALLOW_DIR, the aggregators' allow-list: put it on a shared filesystem (or fill
#     it yourself on every node) so that every node's aggregator knows every node's key. An
#     aggregator reads a key published after its start at that node's next handshake; the
#     refused collector exits 1 and systemd restarts it (RestartSec=5s).
# Without the site's aggregator key nothing is started (the link is never run without keys).
#
# Why systemd units where there is systemd: it gives restart on failure, a bounded
# SIGTERM-then-SIGKILL stop, hardening and the journal; the process is not in the job's
# cgroup, so Slurm's own kill at job end does not cut the drain. The direct launcher gives the
# bounded stop (in the epilog) and the state folders, not the rest.
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
: "${COMMSCOPE_PORT:=}"                             # fixed ZeroMQ port; empty: per job
: "${COMMSCOPE_METRICS_PORT:=}"                     # fixed /metrics port; empty: per job
: "${COMMSCOPE_PORT_BASE:=20000}"                   # per-job ZeroMQ port: BASE + J mod RANGE
: "${COMMSCOPE_METRICS_PORT_BASE:=24500}"           # per-job /metrics port: BASE + J mod RANGE
: "${COMMSCOPE_PORT_RANGE:=4500}"
: "${COMMSCOPE_RESERVED_PORTS:=29400-29600}"        # never bound: torchrun, MASTER_PORT, c10d
: "${COMMSCOPE_EPHEMERAL_FILE:=/proc/sys/net/ipv4/ip_local_port_range}"
: "${COMMSCOPE_FILE_SD_DIR:=/var/lib/commscope/file_sd}"  # Prometheus file_sd_configs reads it
: "${COMMSCOPE_IDLE_TIMEOUT:=1800}"                 # aggregator backstop, seconds
: "${COMMSCOPE_COLLECT_ARGS:=}"                     # e.g. "--poll" on NFS/Lustre
: "${COMMSCOPE_AGGREGATE_ARGS:=}"                   # e.g. "--config /etc/commscope/x.toml"
: "${COMMSCOPE_START_TIMEOUT:=30}"                  # seconds for each `systemctl start`
: "${COMMSCOPE_BIN:=/usr/local/bin/commscope}"      # `commscope keys`; direct: the daemons
: "${COMMSCOPE_KEYS_DIR:=/etc/commscope/keys}"      # the units' LoadCredential= paths too
: "${COMMSCOPE_ALLOW_DIR:=$COMMSCOPE_KEYS_DIR/allow}"  # shared: every node's public key
: "${COMMSCOPE_MAKE_KEYS:=1}"                       # 0: never make a node's pair here
: "${COMMSCOPE_SHARD_NODES:=0}"                     # K: an aggregator per K nodes; 0: one
: "${COMMSCOPE_RANKS_PER_NODE:=0}"                  # G: a block's ranks (--ranks); 0: unknown
: "${COMMSCOPE_LAUNCHER:=auto}"                     # systemd, direct, or auto (systemd if it runs)
: "${COMMSCOPE_SYSTEMD_MARK:=/run/systemd/system}"  # exists when systemd runs the node
: "${COMMSCOPE_STATE_ROOT:=/var/lib}"               # direct: the units' StateDirectory root
: "${COMMSCOPE_REPORTS_DIR:=$COMMSCOPE_STATE_ROOT/commscope-reports}"  # direct: reports go to DIR/J
: "${COMMSCOPE_LOG_DIR:=/var/log/commscope}"        # direct: J-collector.log, J-aggregator.log
: "${COMMSCOPE_COLLECT_JOBS:=4}"                    # direct: collect --jobs (the unit's default)
: "${COMMSCOPE_DRAIN:=20}"                          # collect --drain: < the epilog's stop bound
: "${COMMSCOPE_LINGER:=15}"                         # aggregate --linger: < the epilog's wait

log() {
    echo "commscope-prolog: $*" >&2
    logger -t commscope-prolog -- "$*" 2>/dev/null || true
}

# The port of job $1 in REPLY: $2 when set (fixed), else base $3 + job mod
# COMMSCOPE_PORT_RANGE. (The port functions answer in REPLY, not on stdout: `--ports` runs
# them for thousands of jobs without a subshell each.)
job_port() {
    local job="$1" fixed="$2" base="$3" range="$COMMSCOPE_PORT_RANGE" port
    if [[ -n "$fixed" ]]; then
        port="$fixed"
    elif [[ "$base" =~ ^[0-9]{1,5}$ && "$range" =~ ^[0-9]{1,5}$ ]] && ((10#$range > 0)); then
        port=$((10#$base + 10#$job % 10#$range))
    else
        log "unusable port base '$base' or range '$range'"
        return 1
    fi
    if [[ ! "$port" =~ ^[0-9]{1,5}$ ]] || ((10#$port < 1 || 10#$port > 65535)); then
        log "job $job: port '$port' is not a number in 1..65535"
        return 1
    fi
    REPLY="$((10#$port))"
}

# Whether something on this node listens on TCP port $1, on any address (IPv4 or IPv6): a
# LISTEN (0A) socket in /proc/net/tcp or tcp6 whose local port is $1 (hex).
port_in_use() {
    local hex
    hex="$(printf '%04X' "$1")"
    awk -v port=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == port { found = 1 }
        END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# The first port of the node's ephemeral range (the kernel's source ports) in EPHEMERAL;
# 32768 (Linux's default) if it cannot be read.
read_ephemeral_start() {
    local low _
    read -r low _ 2>/dev/null <"$COMMSCOPE_EPHEMERAL_FILE"
    [[ "$low" =~ ^[0-9]{1,5}$ ]] && EPHEMERAL="$((10#$low))" || EPHEMERAL=32768
}

# Why port $1 may not be bound, in REPLY (empty: it may): reserved for the training job, or
# in the ephemeral range (EPHEMERAL).
port_refusal() {
    local port="$1" span low high
    REPLY=""
    for span in ${COMMSCOPE_RESERVED_PORTS//,/ }; do
        low="${span%-*}" high="${span#*-}"
        [[ "$low" =~ ^[0-9]{1,5}$ && "$high" =~ ^[0-9]{1,5}$ ]] || continue
        if ((port >= 10#$low && port <= 10#$high)); then
            REPLY="in COMMSCOPE_RESERVED_PORTS ($span: torchrun, MASTER_PORT, c10d)"
            return 0
        fi
    done
    ((port >= EPHEMERAL)) && REPLY="in the ephemeral range (from $EPHEMERAL)"
    return 0
}

# The job's two ports in REPLY, "ZMQ METRICS"; 1 (logged) when one may not be bound.
job_ports() {
    local job="$1" port metrics_port p
    job_port "$job" "$COMMSCOPE_PORT" "$COMMSCOPE_PORT_BASE" || return 1
    port="$REPLY"
    job_port "$job" "$COMMSCOPE_METRICS_PORT" "$COMMSCOPE_METRICS_PORT_BASE" || return 1
    metrics_port="$REPLY"
    if ((port == metrics_port)); then
        log "job $job: ZeroMQ and /metrics would share port $port"
        return 1
    fi
    for p in "$port" "$metrics_port"; do
        port_refusal "$p"
        if [[ -n "$REPLY" ]]; then
            log "job $job: port $p is $REPLY: set COMMSCOPE_PORT_BASE," \
                "COMMSCOPE_METRICS_PORT_BASE and COMMSCOPE_PORT_RANGE to blocks outside it" \
                "(defaults 20000, 24500, 4500)"
            return 1
        fi
    done
    REPLY="$port $metrics_port"
}

# `prolog.sh --ports J...`: each job's ports, as every node computes them; nothing else.
print_ports() {
    local job
    read_ephemeral_start
    for job in "$@"; do
        if job_ports "$job" 2>/dev/null; then
            echo "$job $REPLY"
        else
            echo "$job refused"
        fi
    done
}

# Prometheus file_sd: this node's aggregator /metrics as a target, written through a rename.
write_file_sd() {
    local file="$1" target="$2" job="$3" tmp
    mkdir -p "$COMMSCOPE_FILE_SD_DIR" || return 1
    tmp="$(mktemp "${file}.XXXXXX")" || return 1
    if ! printf '[{"targets": ["%s"], "labels": {"slurm_job_id": "%s"}}]\n' "$target" "$job" \
        >"$tmp" || ! chmod 0644 "$tmp" || ! mv -f "$tmp" "$file"; then
        rm -f "$tmp"
        return 1
    fi
}

# The nodes of the job, one a line, in Slurm's order (Slurm 22.05 gives the prolog
# SLURM_NODELIST, later ones SLURM_JOB_NODELIST too).
job_nodes() {
    scontrol show hostnames "${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}"
}

# The address Slurm reaches node $1 at (its NodeAddr: the name itself unless slurm.conf gives
# NodeAddr or NodeHostname), where the node's aggregator is reached too.
node_addr() {
    local addr
    addr="$(timeout 10 scontrol show node -o "$1" 2>/dev/null | grep -o 'NodeAddr=[^ ]*')"
    addr="${addr#NodeAddr=}"
    echo "${addr:-$1}"
}

# This node's block of the job's nodes (one a line in $2): "FIRST_NODE NODES SHARD RANKS",
# where SHARD is empty when the whole job is one block (COMMSCOPE_SHARD_NODES=0), and RANKS
# (the block's ranks, LOW-HIGH) empty unless COMMSCOPE_RANKS_PER_NODE is set.
block_of() {
    local node="$1" size="$COMMSCOPE_SHARD_NODES" per="$COMMSCOPE_RANKS_PER_NODE" i first count
    local -a all
    mapfile -t all <<<"$2"
    if [[ ! "$size" =~ ^[0-9]{1,6}$ ]]; then
        log "unusable COMMSCOPE_SHARD_NODES '$size' (nodes per aggregator; 0: one for the job)"
        return 1
    fi
    if [[ ! "$per" =~ ^[0-9]{1,4}$ ]]; then
        log "unusable COMMSCOPE_RANKS_PER_NODE '$per' (ranks on each node; 0: unknown)"
        return 1
    fi
    size=$((10#$size)) per=$((10#$per))
    if ((size == 0)); then
        echo "${all[0]} ${#all[@]}"
        return 0
    fi
    for i in "${!all[@]}"; do
        [[ "${all[$i]}" == "$node" ]] || continue
        first=$((i / size * size))
        count=$((${#all[@]} - first < size ? ${#all[@]} - first : size))
        echo "${all[$first]} $count s$((i / size))$(block_ranks "$first" "$count" "$per")"
        return 0
    done
    log "node $node is not among the job's nodes: its shard is unknown"
    return 1
}

# " LOW-HIGH": the ranks of `count` nodes from node index `first`, `per` a node (none if 0).
block_ranks() {
    (($3 > 0)) && echo " $(($1 * $3))-$((($1 + $2) * $3 - 1))"
    return 0
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

# This node's key pair: made on its first job (through a 0700 temporary folder and renames),
# then its public key published in the allow-list (a rename, never a half-written file).
node_keys() {
    local node="$1" keys="$COMMSCOPE_KEYS_DIR" tmp
    if [[ ! -f "$keys/node.key_secret" ]]; then
        if [[ "$COMMSCOPE_MAKE_KEYS" != 1 ]]; then
            log "no key pair $keys/node.key_secret for node $node (COMMSCOPE_MAKE_KEYS=0)"
            return 1
        fi
        tmp="$(mktemp -d "$keys/.new.XXXXXX")" || return 1
        if ! "$COMMSCOPE_BIN" keys --out "$tmp/pair" --name "$node" >/dev/null \
            || ! mv -f "$tmp/pair/$node.key" "$keys/node.key" \
            || ! mv -f "$tmp/pair/$node.key_secret" "$keys/node.key_secret"; then
            rm -rf "$tmp"
            log "cannot make a key pair for node $node in $keys"
            return 1
        fi
        rm -rf "$tmp"
        log "made the key pair of node $node"
    fi
    cmp -s "$keys/node.key" "$COMMSCOPE_ALLOW_DIR/$node.key" && return 0
    if ! mkdir -p "$COMMSCOPE_ALLOW_DIR" \
        || ! cp "$keys/node.key" "$COMMSCOPE_ALLOW_DIR/.$node.key.tmp" \
        || ! mv -f "$COMMSCOPE_ALLOW_DIR/.$node.key.tmp" "$COMMSCOPE_ALLOW_DIR/$node.key"; then
        log "cannot publish $node.key in $COMMSCOPE_ALLOW_DIR"
        return 1
    fi
}

# systemd, or direct: COMMSCOPE_LAUNCHER, `auto` meaning systemd when it runs the node.
launcher() {
    case "$COMMSCOPE_LAUNCHER" in
        systemd | direct) echo "$COMMSCOPE_LAUNCHER" ;;
        auto) [[ -d "$COMMSCOPE_SYSTEMD_MARK" ]] && echo systemd || echo direct ;;
        *) log "unusable COMMSCOPE_LAUNCHER '$COMMSCOPE_LAUNCHER' (systemd, direct or auto)"
           return 1 ;;
    esac
}

start_unit() {
    if ! timeout "$COMMSCOPE_START_TIMEOUT" systemctl start "$1"; then
        log "could not start $1 (see: journalctl -u $1)"
        return 1
    fi
}

# The --state folder of service $1 (collector, aggregator) of job $2, as the units have it.
state_dir() {
    [[ "$1" == collector ]] && echo "$COMMSCOPE_STATE_ROOT/commscope/$2" \
        || echo "$COMMSCOPE_STATE_ROOT/commscope-aggregator/$2"
}

# Direct launcher: `commscope ARGS...` for service $1 (collector, aggregator) of job $2 with
# umask $3 (the unit's), in its own session with no terminal and in /; its pid in
# RUN/NAME.pid (written by the process itself, so it is the daemon's whatever setsid does),
# its output in the log folder.
launch() {
    local name="$1" job="$2" mask="$3" run="$COMMSCOPE_STATE_ROOT/commscope-run/$2" pid i
    local log_file="$COMMSCOPE_LOG_DIR/$2-$1.log"
    shift 3
    if ! mkdir -p "$run" "$COMMSCOPE_LOG_DIR" || ! chmod 0700 "$run"; then
        log "job $job: cannot make $run or $COMMSCOPE_LOG_DIR"
        return 1
    fi
    rm -f "$run/$name.pid"
    # shellcheck disable=SC2016  # $$, $1, $2, $3 and $@ are the inner bash's
    setsid bash -c 'cd / && umask "$3" && echo "$$" >"$1.new" && mv -f "$1.new" "$1" \
        && exec "${@:4}" >>"$2" 2>&1' _ "$run/$name.pid" "$log_file" "$mask" "$COMMSCOPE_BIN" "$@" \
        </dev/null >/dev/null 2>&1 &
    for ((i = 0; i < 50; i++)); do
        [[ -s "$run/$name.pid" ]] && break
        sleep 0.1
    done
    sleep 1  # a daemon refusing its settings exits at once: say so here
    pid="$(cat "$run/$name.pid" 2>/dev/null)"
    if [[ ! "$pid" =~ ^[0-9]+$ ]] || ! tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null \
        | grep -qxF -- "$(state_dir "$name" "$job")"; then
        log "job $job: the $name exited at once (see $log_file)"
        return 1
    fi
}

# Direct launcher: the job's collector, with the unit's flags ($5: its extra arguments); its
# secret key copied (0600, in the 0700 run folder) where it is the only one, as the unit's
# credential is.
launch_collector() {
    local job="$1" node="$2" endpoint="$3" watch="$4" creds
    creds="$COMMSCOPE_STATE_ROOT/commscope-run/$job/collector-keys"
    if ! mkdir -p "$creds" || ! chmod 0700 "$COMMSCOPE_STATE_ROOT/commscope-run/$job" \
        || ! cp "$COMMSCOPE_KEYS_DIR/node.key_secret" "$creds/node.key_secret" \
        || ! chmod 0600 "$creds/node.key_secret"; then
        log "job $job: cannot copy the node's key into $creds"
        return 1
    fi
    # shellcheck disable=SC2086  # $5: several flags, as the unit splits them
    launch collector "$job" 0077 collect --watch "$watch" --aggregator "$endpoint" --node "$node" \
        --state "$(state_dir collector "$job")" --keys "$creds" \
        --server-key "$COMMSCOPE_KEYS_DIR/aggregator.key" --jobs "$COMMSCOPE_COLLECT_JOBS" $5
}

# Direct launcher: the job's aggregator, with the unit's flags ($4: its extra arguments).
launch_aggregator() {
    local job="$1" port="$2" metrics_port="$3"
    mkdir -p "$COMMSCOPE_REPORTS_DIR/$job" && chmod 0755 "$COMMSCOPE_REPORTS_DIR/$job" || return 1
    # shellcheck disable=SC2086  # $4: several flags, as the unit splits them
    launch aggregator "$job" 0022 aggregate --listen "tcp://0.0.0.0:$port" \
        --metrics-port "$metrics_port" --out "$COMMSCOPE_REPORTS_DIR/$job" \
        --state "$(state_dir aggregator "$job")" --job "$job" \
        --keys "$COMMSCOPE_KEYS_DIR" --allow "$COMMSCOPE_ALLOW_DIR" $4
}

# On a block's first node: the job's aggregator, unless its ports are taken, and its file_sd.
start_aggregator() {
    local job="$1" node="$2" port="$3" metrics_port="$4" sd="$COMMSCOPE_FILE_SD_DIR/$1${5:+-$5}.json" p
    if [[ ! -f "$COMMSCOPE_KEYS_DIR/aggregator.key_secret" ]]; then
        log "job $job: no $COMMSCOPE_KEYS_DIR/aggregator.key_secret: aggregator not started"
        return 1
    fi
    for p in "$port" "$metrics_port"; do
        if port_in_use "$p"; then
            log "job $job: port $p is in use on $node (another job's aggregator?):" \
                "aggregator not started; set COMMSCOPE_PORT_BASE or COMMSCOPE_PORT_RANGE"
            return 1
        fi
    done
    if [[ "$6" == systemd ]]; then
        start_unit "commscope-aggregator@$job.service" || return 1
    else
        launch_aggregator "$job" "$port" "$metrics_port" "$7" || return 1
    fi
    if ! write_file_sd "$sd" "$node:$metrics_port" "$job"; then
        log "job $job: cannot write $sd (Prometheus file_sd)"
        return 1
    fi
}

main() {
    [[ "$COMMSCOPE_ENABLE" == 1 ]] || return 0
    local job="${SLURM_JOB_ID:-}" user="${SLURM_JOB_USER:-}"
    if [[ ! "$job" =~ ^[0-9]{1,18}$ ]]; then
        log "no usable SLURM_JOB_ID ('$job'): nothing to do"
        return 0
    fi

    local nodes node block first count shard ranks
    if ! nodes="$(job_nodes)" || [[ -z "$nodes" ]]; then
        log "job $job: cannot list the job's nodes (scontrol): commscope not started"
        return 1
    fi
    node="${SLURMD_NODENAME:-$(hostname -s)}"
    block="$(block_of "$node" "$nodes")" || return 1
    read -r first count shard ranks <<<"$block"
    local host="$COMMSCOPE_AGGREGATOR_HOST"
    [[ -n "$host" ]] || host="$(node_addr "$first")"
    local name_re='^[A-Za-z0-9._-]+$'
    if [[ ! "$node" =~ $name_re || ! "$host" =~ $name_re ]]; then
        log "job $job: unusable node name '$node' or aggregator host '$host'"
        return 1
    fi
    local port metrics_port how
    [[ -n "$COMMSCOPE_AGGREGATOR_HOST" && -z "$COMMSCOPE_PORT" ]] && COMMSCOPE_PORT=5555
    read_ephemeral_start
    job_ports "$job" || return 1
    read -r port metrics_port <<<"$REPLY"
    how="$(launcher)" || return 1

    local watch="$COMMSCOPE_TRACE_ROOT/$job"
    if ! mkdir -p "$watch" || ! chmod 0700 "$watch" \
        || { [[ -n "$user" ]] && ! chown "$user:" "$watch"; }; then
        log "job $job: cannot prepare the trace folder $watch"
        return 1
    fi

    if [[ ! -r "$COMMSCOPE_KEYS_DIR/aggregator.key" ]]; then
        log "job $job: no $COMMSCOPE_KEYS_DIR/aggregator.key (make the site's pair once:" \
            "commscope keys --out $COMMSCOPE_KEYS_DIR --name aggregator): commscope not started"
        return 1
    fi
    node_keys "$node" || return 1

    local collect_args="--drain $COMMSCOPE_DRAIN${COMMSCOPE_COLLECT_ARGS:+ $COMMSCOPE_COLLECT_ARGS}"
    local aggregate_args="--expect-nodes $count${shard:+ --shard $shard}${ranks:+ --ranks $ranks}"
    aggregate_args+=" --idle-timeout $COMMSCOPE_IDLE_TIMEOUT --linger $COMMSCOPE_LINGER"
    aggregate_args+="${COMMSCOPE_AGGREGATE_ARGS:+ $COMMSCOPE_AGGREGATE_ARGS}"
    mkdir -p "$COMMSCOPE_ENV_DIR" || return 1
    if ! write_env "$COMMSCOPE_ENV_DIR/$job.env" \
        "# written by the commscope Slurm prolog for job $job; removed by the epilog" \
        "COMMSCOPE_WATCH_DIR=$watch" \
        "COMMSCOPE_AGGREGATOR=tcp://$host:$port" \
        "COMMSCOPE_NODE=$node" \
        "COMMSCOPE_COLLECT_ARGS=\"$collect_args\"" \
        "COMMSCOPE_SERVER_KEY=$COMMSCOPE_KEYS_DIR/aggregator.key" \
        "COMMSCOPE_ALLOW_DIR=$COMMSCOPE_ALLOW_DIR" \
        "COMMSCOPE_LISTEN=tcp://0.0.0.0:$port" \
        "COMMSCOPE_METRICS_PORT=$metrics_port" \
        "COMMSCOPE_AGGREGATE_ARGS=\"$aggregate_args\""
    then
        log "job $job: cannot write $COMMSCOPE_ENV_DIR/$job.env"
        return 1
    fi

    local status=0
    # The aggregator first, so the collectors' first connection finds it (they retry anyway).
    if [[ -z "$COMMSCOPE_AGGREGATOR_HOST" && "$node" == "$first" ]]; then
        start_aggregator "$job" "$host" "$port" "$metrics_port" "$shard" "$how" \
            "$aggregate_args" || status=1
    fi
    if [[ "$how" == systemd ]]; then
        start_unit "commscope-collector@$job.service" || status=1
    else
        launch_collector "$job" "$node" "tcp://$host:$port" "$watch" "$collect_args" || status=1
    fi
    [[ $status == 0 ]] && log "job $job: collector started on $node ($how)," \
        "aggregator tcp://$host:$port"
    return "$status"
}

# main runs in a subshell: a shell error in it (a bad setting under `set -u`) ends only the
# subshell.
if [[ "${1:-}" == --ports ]]; then
    shift
    print_ports "$@"
    exit 0
fi
( main "$@" ) || log "job ${SLURM_JOB_ID:-?}: commscope setup incomplete; the job runs without it"
exit 0
