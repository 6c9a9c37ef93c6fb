"""``POST /api/v1/clusters/<cluster>/nodes/<node>/topology``: a node's ``nvidia-smi topo -m``
output as the raw request body (what deploy/topology/gpuobs-topology-upload sends from a
DaemonSet or a Slurm prolog). Token authentication; the token must name the cluster and the
kind ``topology`` (diagnosis/api/auth.py). The text is parsed in the request (bounded by its
size) and kept as one stored batch; the answer is 202 with what the matrix says and the batch,
which a worker stores as the node's topology (``diagnosis.actions.records.inbound``; ``GET
.../inbound/{batch}`` says how that went), or 400 naming why the text is no topology matrix
(nothing stored)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import get_cluster_for_sender
from diagnosis.actions.records.inbound import receive_node_topology
from diagnosis.api.auth import AUTHENTICATION, CanUploadTopology
from diagnosis.api.errors import invalid
from diagnosis.api.responses import TopologyStoredSerializer
from diagnosis.choices import SenderKind
from diagnosis.edge.topology import MAX_TEXT_BYTES, TopologyError
from diagnosis.throttling import SenderRateThrottle


class RawTextParser(BaseParser):
    """Any body, kept as bytes (``nvidia-smi topo -m | curl --data-binary @-``)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        return stream.read(MAX_TEXT_BYTES + 1) if stream is not None else b""


class NodeTopologyView(APIView):
    authentication_classes = AUTHENTICATION
    permission_classes = [CanUploadTopology]
    parser_classes = [RawTextParser]
    throttle_classes = [SenderRateThrottle]

    @extend_schema(
        # the raw text, sent as any content type (curl --data-binary); named as bytes
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={
            202: OpenApiResponse(TopologyStoredSerializer, description="checked, to be stored"),
        },
    )
    def post(self, request: Request, cluster: str, node: str) -> Response:
        target = get_cluster_for_sender(request.auth, cluster, SenderKind.TOPOLOGY)
        body = request.data if isinstance(request.data, bytes) else b""  # empty: DRF gives {}
        try:
            batch, parsed = receive_node_topology(request.user, target, node, body)
        except TopologyError as exc:
            return invalid({"body": str(exc)}, str(exc))
        return Response(
            {
                "cluster": target.name,
                "node": node,
                **parsed,
                "batch": batch.pk,
                "state": batch.state,
            },
            status=status.HTTP_202_ACCEPTED,
        )
