#!/usr/bin/env bash
# Install Debian's SLURM (slurm-wlm, with munge) so that tools/slurm/check_local_slurm.sh, and the test that runs
# it (tests/studies/test_engine.py), can start a one-node SLURM on loopback here. Nothing is started or enabled:
# the check starts its own daemons in a namespace of their own and they die with it.
#
#   bash tools/slurm/install_slurm.sh     # `make test-e2e` runs it first, non-fatal: without root or apt the test skips
#
# Idempotent: does nothing when slurmctld, slurmd, munged and sbatch are already on PATH.
set -euo pipefail

if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
   && command -v sbatch >/dev/null; then
    echo "install_slurm: slurm-wlm and munge already present, nothing to do."
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_slurm: apt-get not found; the SLURM check will be skipped (install slurm-wlm by hand)" >&2
    exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install_slurm: must run as root to install Debian packages (sudo $0); the SLURM check will be skipped" >&2
    exit 1
fi

echo "install_slurm: installing slurm-wlm"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The packages' own daemons are not wanted running: policy-rc.d answers 101 (do not start) to every service start.
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
# (not `sbatch --version`: with no slurm.conf it looks the controller up in DNS)
echo "install_slurm: done: slurm-wlm $(dpkg-query -W -f='${Version}' slurm-wlm)"
