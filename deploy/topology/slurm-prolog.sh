#!/usr/bin/env bash
# Slurm Prolog snippet (slurm.conf: Prolog=/etc/slurm/prolog.d/*): upload this node's GPU
# topology to gpuobs at most once a day, in the background, never failing or delaying the job.
# Reads /etc/gpuobs/topology.env (GPUOBS_URL, GPUOBS_CLUSTER, GPUOBS_TOKEN_FILE); NODE_NAME is
# Slurm's name of the node.
stamp=/var/run/gpuobs-topology.stamp
if [[ -f "$stamp" && -n "$(find "$stamp" -mmin -1440 2>/dev/null)" ]]; then exit 0; fi
(
  set -a
  # shellcheck disable=SC1091
  . /etc/gpuobs/topology.env
  set +a
  NODE_NAME="${SLURMD_NODENAME:-$(hostname -s)}" \
    /usr/local/bin/gpuobs-topology-upload && touch "$stamp"
) >/dev/null 2>&1 &
exit 0
