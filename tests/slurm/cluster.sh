#!/usr/bin/env bash
# A two-node SLURM cluster for tests on one machine: munged, slurmctld and one slurmd per node
# (`slurmd -N n1`, `-N n2`, each with its own port, spool, log and pid file) as plain
# background processes (no systemd, no cgroups), two fake GPUs per node, job records in a
# jobcomp text file.
#
#   tests/slurm/cluster.sh install        apt-get the Debian packages (root, once)
#   tests/slurm/cluster.sh start DIR      start daemons with state under DIR; prints env
#   tests/slurm/cluster.sh stop DIR       stop every daemon started for DIR, by PID
#
# After `start`, `source DIR/env.sh` points sbatch/squeue/scontrol at this cluster.
set -euo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge)
DEFAULT_CONF=/etc/slurm/slurm.conf

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return 0
    fi
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        echo "cluster.sh: SLURM is not installed and apt-get as root is unavailable;" \
            "install ${PACKAGES[*]} by hand" >&2
        return 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${PACKAGES[@]}" >/dev/null
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {
    local what=$1 tries=$2
    shift 2
    for _ in $(seq "$tries"); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    echo "cluster.sh: $what did not come up; see the logs under $DIR" >&2
    return 1
}

start() {
    # The jobstep executor strips SLURM_CONF before its nested srun, so srun inside a job
    # finds the cluster only at the default path: it gets linked there, which needs that
    # path free (no real slurm.conf, no other live test cluster).
    if [[ -e $DEFAULT_CONF && ! -L $DEFAULT_CONF ]]; then
        echo "cluster.sh: $DEFAULT_CONF exists and is not a test cluster's link; refusing" >&2
        return 1
    fi
    local other
    other=$(dirname "$(readlink "$DEFAULT_CONF" 2>/dev/null || echo /nonexistent/x)")
    if [[ -f $other/slurmctld.pid ]] && kill -0 "$(cat "$other/slurmctld.pid")" 2>/dev/null; then
        echo "cluster.sh: another test cluster ($other) is running; stop it first" >&2
        return 1
    fi
    mkdir -p "$DIR"/{munge,key,state,spool,log,gpu}
    DIR=$(cd "$DIR" && pwd)
    local host ctld_port cpus mem_mb
    host=$(hostname -s)
    ctld_port=$(free_port)
    cpus=$(nproc)
    # Leave a quarter of the memory to the machine itself, the rest split over the nodes.
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.75 / 2}' /proc/meminfo)

    # Fake GPUs: SLURM only needs device files it can stat; character devices like
    # /dev/null pass its check (regular files get the node marked invalid).
    # Two per node, so four one-GPU jobs run at once as on a real partition (not two).
    for i in 1 2 3 4; do
        [[ -e $DIR/gpu/fake$i ]] || mknod "$DIR/gpu/fake$i" c 1 3
    done
    mkdir -p "$DIR/spool/n1" "$DIR/spool/n2"

    # A private munge key and socket, so nothing on the machine is touched.
    [[ -f $DIR/key/munge.key ]] || dd if=/dev/urandom of="$DIR/key/munge.key" bs=1k count=1 2>/dev/null
    chmod 700 "$DIR/key"
    chmod 400 "$DIR/key/munge.key"
    chmod 755 "$DIR/munge"
    munged --force --key-file="$DIR/key/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munge.seed"

    cat >"$DIR/gres.conf" <<EOF
NodeName=n1 Name=gpu Type=fake File=$DIR/gpu/fake[1-2]
NodeName=n2 Name=gpu Type=fake File=$DIR/gpu/fake[3-4]
EOF
    cat >"$DIR/slurm.conf" <<EOF
ClusterName=accelstudy-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
DefMemPerCPU=1000
MinJobAge=7200
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
MpiDefault=none
MailProg=/bin/true
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus RealMemory=$mem_mb Gres=gpu:fake:2 Feature=gpu State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$cpus RealMemory=$mem_mb Gres=gpu:fake:2 Feature=gpu State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=n1,n2 MaxTime=INFINITE State=UP
EOF
    mkdir -p "$(dirname "$DEFAULT_CONF")"
    ln -sfn "$DIR/slurm.conf" "$DEFAULT_CONF"
    cat >"$DIR/env.sh" <<EOF
export SLURM_CONF=$DIR/slurm.conf
EOF
    export SLURM_CONF=$DIR/slurm.conf

    slurmctld -f "$SLURM_CONF" -i
    wait_for slurmctld 60 scontrol ping
    slurmd -f "$SLURM_CONF" -N n1
    slurmd -f "$SLURM_CONF" -N n2
    wait_for "slurmd (n1, n2)" 60 bash -c "[[ \$(sinfo -h -N -p gpu -o %t | grep -cE '^(idle|mix|alloc)') == 2 ]]"
    echo "SLURM_CONF=$SLURM_CONF"
}

stop() {
    [[ -d $DIR ]] || return 0
    DIR=$(cd "$DIR" && pwd)
    local pidfile pid
    # Without cgroups, job processes outlive slurmd: cancel every job and let them end.
    if [[ -f $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
        export SLURM_CONF=$DIR/slurm.conf
        squeue -h -o %A | xargs -r scancel --full 2>/dev/null || true
        for _ in $(seq 60); do [[ -z $(squeue -h -o %A 2>/dev/null) ]] && break; sleep 0.5; done
    fi
    for pidfile in "$DIR"/slurmd-n*.pid "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile")
        if kill "$pid" 2>/dev/null; then
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
        fi
        rm -f "$pidfile"
    done
    if [[ $(readlink "$DEFAULT_CONF" 2>/dev/null) == "$DIR/slurm.conf" ]]; then
        rm -f "$DEFAULT_CONF"
    fi
}

case ${1:-} in
    install) install_packages ;;
    start) DIR=${2:?usage: cluster.sh start DIR}; start ;;
    stop) DIR=${2:?usage: cluster.sh stop DIR}; stop ;;
    *) echo "usage: cluster.sh install | start DIR | stop DIR" >&2; exit 2 ;;
esac
