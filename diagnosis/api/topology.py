"""``POST /api/v1/clusters/<cluster>/nodes/<node>/topology``: a node's ``nvidia-smi topo -m``
output as the raw request body (what deploy/topology/gpuobs-topology-upload sends from a
DaemonSet or a Slurm prolog). Token authentication; the token must name the cluster and the
kind ``topology`` (diagnosis/api/auth.py). Answers what was stored, or 400 naming why the text
is no topology matrix (nothing stored)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from diagnosis.access import get_cluster_for_sender
from diagnosis.actions.records.topology import record_node_topology
from diagnosis.api.auth import AUTHENTICATION, CanUploadTopology
from diagnosis.api.errors import invalid
from diagnosis.api.responses import TopologyStoredSerializer
from diagnosis.choices import SenderKind
from diagnosis.edge.topology import MAX_TEXT_BYTES, TopologyError


class RawTextParser(BaseParser):
    """Any body, kept as bytes (``nvidia-smi topo -m | curl --data-binary @-``)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None) -> bytes:
        return stream.read(MAX_TEXT_BYTES + 1) if stream is not None else b""


class NodeTopologyView(APIView):
    authentication_classes = AUTHENTICATION
    permission_classes = [CanUploadTopology]
    parser_classes = [RawTextParser]

    @extend_schema(
        # the raw text, sent as any content type (curl --data-binary); named as bytes
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={
            200: OpenApiResponse(TopologyStoredSerializer, description="replaced the stored one"),
            201: OpenApiResponse(TopologyStoredSerializer, description="stored a new one"),
        },
    )
    def post(self, request: Request, cluster: str, node: str) -> Response:
        target = get_cluster_for_sender(request.auth, cluster, SenderKind.TOPOLOGY)
        body = request.data if isinstance(request.data, bytes) else b""  # empty: DRF gives {}
        try:
            row, created = record_node_topology(target, node, body, user=request.user)
        except TopologyError as exc:
            return invalid({"body": str(exc)}, str(exc))
        return Response(
            {
                "cluster": target.name,
                "node": row.node,
                "gpus": row.gpus,
                "nvlink_domains": row.nvlink_domains,
                "numa": row.numa,
                "created": created,
            },
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
