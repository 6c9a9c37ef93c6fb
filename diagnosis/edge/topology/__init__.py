"""GPU topology from real sources, normalized into the snapshot's ``nodes[].topology``.

``nvidia_smi`` parses ``nvidia-smi topo -m`` text (uploaded per node, or read from the
node-exporter textfile metric that ``deploy/topology/`` produces) into NVLink domains and a NUMA
node per GPU. Pure input normalization: no Django, no I/O.
"""

from diagnosis.edge.topology.nvidia_smi import (
    MAX_GPUS,
    MAX_TEXT_BYTES,
    Topology,
    TopologyError,
    parse_topo_matrix,
    parse_topo_tables,
    textfile,
)

__all__ = [
    "MAX_GPUS",
    "MAX_TEXT_BYTES",
    "Topology",
    "TopologyError",
    "parse_topo_matrix",
    "parse_topo_tables",
    "textfile",
]
