"""``gpuobs RESOURCE ACTION``: clusters, findings, incidents and recommendations over the REST
API; lists and details as a table or, with ``--json``, the API's own JSON; a recommendation
requested or approved (docs/cli.md). Exit 0 when done, 2 when the request is refused as given
(bad input, an unknown object, a role or state that does not allow it), 1 when the server or
the network failed."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuobs_cli.client import OK, REFUSED, Api, ApiError, load_settings, segment

# The columns of each list, in order (every field is in --json).
COLUMNS = {
    "clusters": ("name", "scheduler_kind", "status", "stale", "dry_run", "last_cycle_at"),
    "findings": ("id", "state", "severity", "rule_id", "subject", "summary"),
    "incidents": ("id", "state", "node", "gpu_index", "xid_code", "opened_at", "summary"),
    "recommendations": ("id", "cluster", "stage", "kind", "target", "verdict", "requested_by"),
}
WIDEST = 60  # a cell is cut to this many characters in a table (never in --json)


def positive(text: str) -> int:
    """An object's id as typed: a positive integer, else a usage error (exit 2)."""
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer id, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="gpuobs",
        description="gpuobs over its REST API. The server and token come from --url, "
        "GPUOBS_URL and GPUOBS_TOKEN, or the config file (docs/cli.md).",
    )
    top.add_argument("--url", help="the server, e.g. https://gpuobs.example.org")
    top.add_argument("--config", help="a TOML file with url and token (or token_file)")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON"
    )
    top.add_argument("--json", action="store_true", help="print the API's JSON")
    resources = top.add_subparsers(dest="resource", required=True, metavar="RESOURCE")

    def actions(name: str, help_text: str) -> argparse._SubParsersAction:
        resource = resources.add_parser(name, help=help_text)
        return resource.add_subparsers(dest="action", required=True, metavar="ACTION")

    def leaf(group: argparse._SubParsersAction, name: str, help_text: str, run: Callable):
        command = group.add_parser(name, help=help_text, parents=[common])
        command.set_defaults(run=run)
        return command

    clusters = actions("clusters", "the clusters you may read")
    leaf(clusters, "list", "every cluster, with how fresh its data is", list_clusters)
    leaf(clusters, "show", "one cluster", show_cluster).add_argument("name")

    findings = actions("findings", "a cluster's findings")
    listing = leaf(findings, "list", "the findings, newest first", list_findings)
    listing.add_argument("--cluster", required=True)
    listing.add_argument("--state", help="firing, pending or resolved")
    listing.add_argument("--rule", help="a rule's id")
    listing.add_argument("--tenant", action="append", help="a tenant (repeatable)")
    listing.add_argument("--limit", type=positive, default=100)
    one = leaf(findings, "show", "one finding", show_finding)
    one.add_argument("--cluster", required=True)
    one.add_argument("id", type=positive)

    incidents = actions("incidents", "a cluster's incidents")
    listing = leaf(incidents, "list", "the incidents, newest first", list_incidents)
    listing.add_argument("--cluster", required=True)
    listing.add_argument("--state", help="open, acknowledged or resolved")
    one = leaf(incidents, "show", "one incident, with its timeline", show_incident)
    one.add_argument("--cluster", required=True)
    one.add_argument("id", type=positive)

    recommendations = actions("recommendations", "changes gpuobs recommends")
    listing = leaf(recommendations, "list", "the recommendations, newest first", list_recs)
    listing.add_argument("--cluster")
    listing.add_argument("--state", help="proposed, approved, applied, ...")
    listing.add_argument("--kind", help="queue-weight, drain-node, ...")
    listing.add_argument(
        "--awaiting-me", action="store_true", help="only the requests you may approve"
    )
    listing.add_argument("--limit", type=positive, default=100)
    leaf(recommendations, "show", "one, with its audit trail", show_rec).add_argument(
        "id", type=positive
    )
    leaf(
        recommendations, "request", "ask for the change (a second person approves)", request
    ).add_argument("id", type=positive)
    approving = leaf(recommendations, "approve", "approve someone else's request", approve)
    approving.add_argument("id", type=positive)
    approving.add_argument(
        "--confirm-harm",
        action="store_true",
        help="approve although the estimate predicts harm (the harm is audited)",
    )
    return top


# -- the commands: each reads or writes through the API and returns what to print -----------


def list_clusters(api: Api, args: argparse.Namespace) -> Any:
    return api.rows("clusters/")


def show_cluster(api: Api, args: argparse.Namespace) -> Any:
    return api.get(f"clusters/{segment(args.name)}/")


def list_findings(api: Api, args: argparse.Namespace) -> Any:
    query = {"state": args.state, "rule": args.rule, "tenant": args.tenant}
    return api.rows(f"clusters/{segment(args.cluster)}/findings", _given(query), args.limit)


def show_finding(api: Api, args: argparse.Namespace) -> Any:
    return api.get(f"clusters/{segment(args.cluster)}/findings/{args.id}")


def list_incidents(api: Api, args: argparse.Namespace) -> Any:
    return api.rows(f"clusters/{segment(args.cluster)}/incidents", _given({"state": args.state}))


def show_incident(api: Api, args: argparse.Namespace) -> Any:
    return api.get(f"clusters/{segment(args.cluster)}/incidents/{args.id}")


def list_recs(api: Api, args: argparse.Namespace) -> Any:
    query = {"cluster": args.cluster, "state": args.state, "kind": args.kind}
    if args.awaiting_me:
        query["awaiting"] = "me"
    return api.rows("recommendations/", _given(query), args.limit)


def show_rec(api: Api, args: argparse.Namespace) -> Any:
    return api.get(f"recommendations/{args.id}/")


def request(api: Api, args: argparse.Namespace) -> Any:
    return api.post(f"recommendations/{args.id}/request/")


def approve(api: Api, args: argparse.Namespace) -> Any:
    body = {"confirm_harm": True} if args.confirm_harm else {}
    return api.post(f"recommendations/{args.id}/approve/", body)


def _given(query: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in query.items() if value not in (None, "", [])}


# -- printing --------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= WIDEST else text[: WIDEST - 1] + "…"


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    cells = [list(columns), *([_cell(row.get(name)) for name in columns] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    )


def details(item: Mapping[str, Any]) -> str:
    width = max((len(key) for key in item), default=0)
    return "\n".join(f"{key.ljust(width)}  {_cell(value)}" for key, value in item.items())


def human(args: argparse.Namespace, answer: Any) -> str:
    if isinstance(answer, list):
        return table(answer, COLUMNS[args.resource]) if answer else "(none)"
    outcome = answer.get("outcome") if isinstance(answer, dict) else None
    if isinstance(outcome, dict):
        return f"recommendation {answer['id']}: {answer.get('stage')} — {outcome.get('message')}"
    return details(answer)


def explain(error: ApiError) -> str:
    """The error as a person reads it: the API's ``detail``, each bad field, a harm to confirm."""
    status = f" (HTTP {error.status})" if error.status else ""
    what = "refused" if error.exit_code == REFUSED else "failed"
    lines = [f"gpuobs: {what}{status}: {error}"]
    body = error.body if isinstance(error.body, dict) else {}
    for path, messages in (body.get("errors") or {}).items():
        lines.append(f"  {path}: {'; '.join(map(str, messages))}")
    if body.get("harm"):
        lines.append("  predicted harm: " + "; ".join(map(str, body["harm"])))
        lines.append("  approve anyway with --confirm-harm")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parser().parse_args(argv)  # a usage error exits 2 here, naming the argument
    try:
        settings = load_settings(
            os.environ if environ is None else environ,
            url=args.url,
            config=None if args.config is None else Path(args.config).expanduser(),
        )
        with Api(settings) as api:
            answer = args.run(api, args)
    except ApiError as error:
        print(explain(error), file=sys.stderr)
        return error.exit_code
    if getattr(args, "json", False):
        print(json.dumps(answer, indent=2, ensure_ascii=False))
    else:
        print(human(args, answer))
    return OK
