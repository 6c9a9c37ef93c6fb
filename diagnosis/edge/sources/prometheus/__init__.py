"""The Prometheus metrics source (docs/architecture.md#one-cycle and docs/integrations.md):
dcgm-exporter metrics read from Prometheus or a compatible server (Thanos, Mimir, VictoriaMetrics).

One collection sends a fixed set of server-side aggregated instant queries over the window, one
per metric family (at most three fallbacks when the answers leave GPUs out), plus at most one
range query for the few GPUs whose Xid gauge was non-zero; the number of queries does not grow
with the cluster. Responses are requested gzip-compressed and parsed column-wise into numpy
arrays. Every label value in a query goes through :func:`promql.quote`; label names come from an
allowlist. Settings, queries, mapping and behaviour on failure: docs/integrations.md, section
"Prometheus".

The modules, from the wire up:

- :mod:`.config`: a cluster's ``metrics_config``, declared (:data:`CONFIG`) and parsed
  (:class:`PrometheusConfig`);
- :mod:`.promql`: PromQL text built safely (quoting, the label allowlist, selections);
- :mod:`.queries`: the PromQL of one collection, per metric family;
- :mod:`.recording`: the recording rules generated from those queries, and whether a collection
  may read their series;
- :mod:`.wire`: the column-wise parsers of Prometheus's answers;
- :mod:`.client`: the HTTP session, retries, deadline and range guards;
- :mod:`.metrics`: one collection of GPU metrics for a set of nodes;
- :mod:`.shards`: a large cluster collected per node pool, and the shards merged;
- :mod:`.collection`: :func:`measure`, the source's measure, and :func:`collect_document`, a
  snapshot of a scheduler-shaped dict.
"""

from diagnosis.edge.sources.prometheus.collection import (
    collect_document,
    collection_report,
    gpu_measurement,
    measure,
)
from diagnosis.edge.sources.prometheus.config import CONFIG, PrometheusConfig, PrometheusConfigError
from diagnosis.edge.sources.prometheus.shards import (
    collect_shard,
    merge_shards,
    run_shards_here,
    shard_payloads,
)
from diagnosis.edge.sources.prometheus.wire import PrometheusError

__all__ = [
    "CONFIG",
    "PrometheusConfig",
    "PrometheusConfigError",
    "PrometheusError",
    "collect_document",
    "collect_shard",
    "collection_report",
    "gpu_measurement",
    "measure",
    "merge_shards",
    "run_shards_here",
    "shard_payloads",
]
