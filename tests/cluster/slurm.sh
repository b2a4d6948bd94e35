#!/usr/bin/env bash
# A real single-node SLURM cluster (controller, node, munge) for the cluster test, run as root.
#   slurm.sh start DIR   install the Debian packages if missing, write the configuration and
#                        start the daemons; their state, logs, sockets and PIDs stay under DIR
#   slurm.sh stop DIR    stop the daemons by the PIDs that start recorded, remove the
#                        configuration
# The configuration goes where every SLURM command looks by default, /etc/slurm: the srun that
# runs a Snakemake job inside its allocation is started with every SLURM_* variable removed,
# SLURM_CONF included. A configuration this script did not write is never touched.
# The node declares two count-only GPUs, so jobs that ask for one are scheduled on a machine
# that has none, two at a time (SLURM sets CUDA_VISIBLE_DEVICES=0 or 1 in them).
set -Eeuo pipefail
action=${1:?usage: slurm.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: slurm.sh start|stop DIR}")
conf=/etc/slurm
mark="# written by attnlab tests/cluster/slurm.sh"

ours() { [ ! -e "$1" ] || head -n 1 "$1" | grep -qxF "$mark"; }

stop() {
  [ -f "$dir/pids" ] || return 0
  # reverse order of start: node, controller, munge
  tac "$dir/pids" | while read -r name pid; do
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    echo "stopped $name ($pid)"
  done
  rm -f "$dir/pids"
  for file in "$conf/slurm.conf" "$conf/gres.conf"; do
    if ours "$file"; then rm -f "$file"; fi
  done
}

start() {
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
  fi
  for file in "$conf/slurm.conf" "$conf/gres.conf"; do
    ours "$file" || { echo "$file exists and was not written by this script" >&2; return 1; }
  done
  mkdir -p "$dir"/{ctld,slurmd,munge,gpu} "$conf"
  host=$(hostname -s)
  cpus=$(slurmd -C | sed -nE 's/.*CPUs=([0-9]+).*/\1/p' | head -1)
  # Count-only GPUs: gres/gpu wants a device file named after each index; /dev/null serves.
  ln -sfn /dev/null "$dir/gpu/nvidia0"
  ln -sfn /dev/null "$dir/gpu/nvidia1"
  printf '%s\nNodeName=%s Name=gpu File=%s\n' "$mark" "$host" "$dir/gpu/nvidia[0-1]" \
    > "$conf/gres.conf"
  cat > "$conf/slurm.conf" <<CONF
$mark
ClusterName=attnlab-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SchedulerType=sched/backfill
# Jobs queue for the GPUs; backfill starts CPU jobs past them, every second, not every 30 s.
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# a job that names no memory would otherwise take the whole node
DefMemPerCPU=1000
GresTypes=gpu
# No accounting database: finished jobs stay visible in squeue for MinJobAge seconds,
# long enough for the test to read every job of its run.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
InactiveLimit=0
KillWait=5
Waittime=0
# The node is sized as in the node section below, not as measured: the SLURM profile asks for
# the paper configuration's memory, which a CI machine does not have (the test's jobs are tiny).
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=65536 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  : > "$dir/pids"
  # Each daemon runs in the foreground (-F, -D) as a background job, so $! is its PID.
  munged -F --force --key-file=/etc/munge/munge.key --socket="$dir/munge/socket" \
    --pid-file="$dir/munge/pid" --seed-file="$dir/munge/seed" --log-file="$dir/munge/log" \
    >/dev/null 2>&1 &
  echo "munged $!" >> "$dir/pids"
  for _ in $(seq 100); do [ -S "$dir/munge/socket" ] && break; sleep 0.1; done
  slurmctld -D -c >/dev/null 2>&1 &
  echo "slurmctld $!" >> "$dir/pids"
  for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
  slurmd -D >/dev/null 2>&1 &
  echo "slurmd $!" >> "$dir/pids"
  for _ in $(seq 150); do
    sinfo -h -N -o %T 2>/dev/null | grep -qx idle && return 0
    sleep 0.2
  done
  echo "the SLURM node did not come up:" >&2
  tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/munge/log >&2 || true
  return 1
}

case $action in
  # a failing start stops what it started (-E: the trap holds inside the function too)
  start) trap stop ERR; start ;;
  stop) stop ;;
  *) echo "usage: slurm.sh start|stop DIR" >&2; exit 2 ;;
esac
