#!/bin/bash
# Check tools/slurm/ray_grid.sbatch on a one-node SLURM started here, on loopback, in a PID and network namespace
# of its own (root, Debian's slurm-wlm and munge: `apt-get install slurm-wlm`). Exits 0 when the batch job
# completed, 77 when this machine cannot run the check (nothing to install, or no namespaces), else the failure.
#
#   bash tools/slurm/check_local_slurm.sh [COMMAND ...]
#
# COMMAND (default: a two-task run_tasks on the cluster, which prints "cluster ok") runs on the Ray head in place
# of the grid (SAAH_GRID_ENTRYPOINT). Everything (munged, slurmctld, slurmd, Ray) lives and dies in the namespace;
# the job's output is printed at the end.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
for tool in slurmctld slurmd munged sbatch unshare ip; do
  if ! command -v "$tool" >/dev/null; then
    echo "check_local_slurm: $tool is not installed (apt-get install slurm-wlm); skipped" >&2
    exit 77
  fi
done
if [ "${1:-}" != "--inside" ]; then
  if ! unshare --pid --net --fork --mount-proc true 2>/dev/null; then
    echo "check_local_slurm: unshare is not permitted here; skipped" >&2
    exit 77
  fi
  exec unshare --pid --net --fork --mount-proc --kill-child=SIGKILL bash "$0" --inside "$@"
fi
shift

ip link set lo up
# Slurm's daemons resolve their listening address with AI_ADDRCONFIG, which finds nothing when loopback is the only
# interface: a tun device that no process reads (whatever is sent to it goes nowhere) gives the namespace one more.
ip tuntap add dev saah0 mode tun
ip addr add 10.254.254.1/32 dev saah0
ip link set saah0 up
work=$(mktemp -d /tmp/saah-slurm-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ctld" "$work/d" "$work/munge"

munged --force --socket="$work/munge/socket" --pid-file="$work/munge/pid" --log-file="$work/munge/log" \
  --seed-file="$work/munge/seed" --key-file=/etc/munge/munge.key

cpus=$(nproc)
cat > "$work/slurm.conf" <<EOF
ClusterName=saahcheck
SlurmctldHost=localhost(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$work/munge/socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/d
SlurmctldPidFile=$work/ctld.pid
SlurmdPidFile=$work/d.pid
SlurmctldLogFile=$work/ctld.log
SlurmdLogFile=$work/d.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
EOF
export SLURM_CONF="$work/slurm.conf"
slurmctld -i
slurmd -N localhost
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 1
done

if [ $# -eq 0 ]; then
  set -- python "$repo/tools/slurm/cluster_smoke.py"
fi
export SAAH_RAY_HEAD_IP=127.0.0.1 SAAH_GRID_ENTRYPOINT="$*" PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"
status=0
sbatch --wait --output="$work/job.out" --nodes=1 tools/slurm/ray_grid.sbatch || status=$?
cat "$work/job.out"
exit "$status"
