#!/usr/bin/env bash
# A real single-node SLURM on this machine, to try the launcher (--launcher slurm) before a real
# cluster and to test it (tests/experiments/test_slurm_*.py): munged, MariaDB, slurmdbd (sacct:
# submitit reads job states with it), slurmctld and slurmd from Debian's packages.
#
#   sudo bash tests/slurm/local_slurm.sh install   # apt-get install slurm-wlm munge slurmdbd mariadb-server
#   sudo bash tests/slurm/local_slurm.sh start     # configure for this machine and start (idempotent)
#   bash tests/slurm/local_slurm.sh status         # sinfo, or why the cluster does not answer
#   sudo bash tests/slurm/local_slurm.sh stop
#
# The cluster: one node, this machine's CPUs and memory (`slurmd -C`), and GPUs: the machine's
# /dev/nvidia[0-N] where it has any, else ARGTCA_SLURM_GPUS (default 2) stand-in device files, so
# that --gpus-per-job is allocated by SLURM's gres/gpu as on a GPU cluster (SLURM sets
# CUDA_VISIBLE_DEVICES; a run on a stand-in sees no CUDA and needs USE_CUDA False).
# Two partitions on it: `debug` (default) and `urgent`, whose jobs preempt debug's (REQUEUE, with
# 60 s grace and the job's own --signal first, as SLURM sites that preempt configure it).
# No cgroups (proctrack/linuxproc: a job's processes are its processes' descendants). Times are
# shortened for tests: a requeued job may start again after 5 s (cred_expire; SLURM's default
# 120), KillWait 10 s (30).
set -euo pipefail

STATE=${ARGTCA_SLURM_STATE:-/var/lib/argtca-slurm}
CONF=/etc/slurm
CLUSTER=argtca
DB_PASS=argtca-local   # a local database reachable through its socket only
HOST=$(hostname -s)

say() { echo "local_slurm: $*"; }
die() { echo "local_slurm: error: $*" >&2; exit 1; }
alive() { local pid; pid=$(cat "$1" 2>/dev/null) && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root (sudo bash $0 $1)"; }
need_bins() {
    for b in munged slurmctld slurmd slurmdbd mariadbd sacctmgr; do
        command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || die "$b is not installed: sudo \
bash $0 install (Debian/Ubuntu: slurm-wlm munge slurmdbd mariadb-server)"
    done
}
wait_for() {   # wait_for SECONDS DESCRIPTION COMMAND...
    local n=$1 what=$2; shift 2
    for _ in $(seq "$((n * 5))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    die "$what did not come up within $n s (logs in $STATE/log)"
}

install() {
    need_root install
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends slurm-wlm munge slurmdbd mariadb-server \
        >"${TMPDIR:-/tmp}/local_slurm_apt.log" 2>&1 \
        || { tail -20 "${TMPDIR:-/tmp}/local_slurm_apt.log"; die "apt-get install failed (run \
apt-get update first)"; }
    say "installed: $(slurmctld -V), $(munged -V 2>&1 | awk '{print $1}'), MariaDB \
$(mariadbd --version | awk '{print $3}')"
}

gpu_files() {   # the node's GPU device files: real ones, else stand-ins
    if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
        ls /dev/nvidia[0-9]* | sort -V
    else
        # character devices (gres/gpu refuses plain files) that are /dev/null underneath
        mkdir -p "$STATE/gpus"
        for i in $(seq 0 $((${ARGTCA_SLURM_GPUS:-2} - 1))); do
            [ -c "$STATE/gpus/gpu$i" ] || { rm -f "$STATE/gpus/gpu$i"; mknod -m 666 \
                "$STATE/gpus/gpu$i" c 1 3; }
            echo "$STATE/gpus/gpu$i"
        done
    fi
}

write_conf() {   # write_conf FILE MODE: stdin to FILE; prints "changed" when it did change
    local tmp; tmp=$(mktemp)
    cat >"$tmp"
    if ! cmp -s "$tmp" "$1"; then
        install_file "$tmp" "$1" "$2"
        echo changed
    fi
    rm -f "$tmp"
}
install_file() { cp "$1" "$2" && chmod "$3" "$2"; }

configure() {   # prints "changed" when a configuration file changed
    mkdir -p "$CONF" "$STATE"/{ctld,spool,log,run,mysql-run}
    local node gpus n
    # this machine as slurmd sees it: CPUs, sockets, cores, threads, memory
    node=$(slurmd -C | head -n 1)
    gpus=$(gpu_files)
    n=$(echo "$gpus" | grep -c .)
    write_conf "$CONF/gres.conf" 644 <<EOF
# written by tests/slurm/local_slurm.sh
NodeName=$HOST Name=gpu File=$(echo "$gpus" | head -n 1 | sed 's/[0-9]*$//')[0-$((n - 1))]
EOF
    write_conf "$CONF/slurm.conf" 644 <<EOF
# written by tests/slurm/local_slurm.sh: a single-node cluster on $HOST
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=cred_expire=5
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobRequeue=1
KillWait=10
MinJobAge=600
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HOST
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
$node Gres=gpu:$n State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=urgent Nodes=$HOST MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
EOF
    write_conf "$CONF/slurmdbd.conf" 600 <<EOF
# written by tests/slurm/local_slurm.sh
AuthType=auth/munge
DbdHost=$HOST
SlurmUser=root
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
}

mysql_sock="$STATE/mysql-run/mysqld.sock"

start() {
    need_root start
    need_bins
    local changed fresh=0
    # a controller without saved state numbers its jobs from 1 again: the accounting database's
    # records of earlier jobs would then answer sacct for the new jobs of the same ids
    [ -e "$STATE/ctld/job_state" ] || fresh=1
    changed=$(configure)
    if [ -n "$changed" ] && alive "$STATE/run/slurmctld.pid"; then
        say "configuration changed: restarting the SLURM daemons"
        stop_slurm
    fi
    # munge: the key comes with the package (one machine: no key to share)
    mkdir -p /run/munge && chown munge:munge /run/munge
    if ! alive /run/munge/munged.pid; then
        runuser -u munge -- /usr/sbin/munged
    fi
    wait_for 10 munged munge -n
    # MariaDB for slurmdbd (sacct): its own socket and pid file under $STATE
    chown mysql:mysql "$STATE/mysql-run"
    if ! alive "$STATE/mysql-run/mysqld.pid"; then
        [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null
        setsid /usr/sbin/mariadbd --user=mysql --socket="$mysql_sock" --port=3306 \
            --bind-address=127.0.0.1 --pid-file="$STATE/mysql-run/mysqld.pid" \
            --log-error="$STATE/log/mariadb.log" </dev/null >/dev/null 2>&1 &
    fi
    wait_for 60 MariaDB mariadb --socket="$mysql_sock" -e "select 1"
    for h in localhost 127.0.0.1; do
        mariadb --socket="$mysql_sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'$h' IDENTIFIED \
BY '$DB_PASS'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'$h';"
    done
    if [ "$fresh" = 1 ]; then
        if alive "$STATE/run/slurmdbd.pid"; then kill "$(cat "$STATE/run/slurmdbd.pid")"; sleep 1; fi
        mariadb --socket="$mysql_sock" -e "DROP DATABASE IF EXISTS slurm_acct_db"
    fi
    # slurmdbd reaches MariaDB over TCP on 127.0.0.1 (StorageHost; "localhost" would mean the
    # default socket, not this one)
    if ! alive "$STATE/run/slurmdbd.pid"; then
        slurmdbd
    fi
    wait_for 30 slurmdbd sacctmgr -n list cluster
    sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" \
        || sacctmgr -i add cluster "$CLUSTER" >/dev/null
    if ! alive "$STATE/run/slurmctld.pid"; then
        slurmctld
    fi
    wait_for 30 slurmctld scontrol ping
    if ! alive "$STATE/run/slurmd.pid"; then
        slurmd
    fi
    wait_for 30 "the node $HOST" node_ready
    status
}

node_ready() {
    local st
    st=$(sinfo -h -n "$HOST" -o %T | head -n 1)
    case "$st" in
        idle*|mixed*|allocated*|completing*) return 0 ;;
        down*|drain*|drained*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 ;;
    esac
    return 1
}

stop_slurm() {
    for d in slurmd slurmctld; do
        if alive "$STATE/run/$d.pid"; then
            kill "$(cat "$STATE/run/$d.pid")"
            for _ in $(seq 50); do alive "$STATE/run/$d.pid" || break; sleep 0.2; done
        fi
    done
}

stop() {
    need_root stop
    stop_slurm
    for pidf in "$STATE/run/slurmdbd.pid" "$STATE/mysql-run/mysqld.pid" /run/munge/munged.pid; do
        if alive "$pidf"; then
            kill "$(cat "$pidf")"
            for _ in $(seq 100); do alive "$pidf" || break; sleep 0.2; done
        fi
    done
    say "stopped"
}

status() {
    if ! command -v sinfo >/dev/null; then
        die "SLURM is not installed: sudo bash $0 install && sudo bash $0 start"
    fi
    if ! timeout 10 scontrol ping >/dev/null 2>&1; then
        die "no SLURM controller answers: sudo bash $0 start"
    fi
    sinfo -o "%P %a %l %D %T %N %c %m %G"
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
