"""Slurm's outputs into the snapshot's vocabulary, from real recorded outputs
(tests/fixtures/slurm, see its README): runs where Slurm is not installed."""

from __future__ import annotations

import json
import re
import time
import tracemalloc

import jsonschema
import pytest

from diagnosis.core import snapshot as snapshot_format
from diagnosis.edge.schedulers.base import ChangeError, SchedulerError
from diagnosis.edge.schedulers.slurm import parse
from diagnosis.edge.schedulers.slurm import topology as slurm_topology
from diagnosis.edge.schedulers.slurm.adapter import (
    SAFE_NAME,
    SlurmReads,
    SlurmSettings,
    scheduler_state,
)
from diagnosis.edge.schedulers.slurm.parse import jobs as slurm_jobs
from diagnosis.edge.schedulers.slurm.parse import values as slurm_values
from diagnosis.edge.schedulers.targets import target_name
from tests.conftest import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "slurm"
SETTINGS = parse.ParseSettings(gpu_models={"h100": "H100-SXM5-80GB"})


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def document(name: str) -> dict:
    return parse.parse_json(text(name), name)


@pytest.fixture(scope="module")
def jobs() -> parse.ParsedJobs:
    return parse.parse_jobs(document("squeue.json"), SETTINGS)


def job(parsed: parse.ParsedJobs, ident: str) -> dict:
    return next(j for j in parsed.jobs if j["id"] == ident)


def reads(sinfo: str = "sinfo_draining.json", **settings) -> SlurmReads:
    parse_settings = parse.ParseSettings(**{"gpu_models": {"h100": "H100-SXM5-80GB"}, **settings})
    return SlurmReads(
        nodes_document=document(sinfo),
        jobs=parse.parse_jobs(document("squeue.json"), parse_settings),
        partitions=parse.parse_partitions(text("scontrol_show_partition.txt")),
        queues=parse.parse_queues(text("sshare.txt"), text("sacctmgr_associations.txt")),
        read_at=1795944000,
    )


# -- small readers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("n[1-2]", ["n1", "n2"]),
        ("n[1-2],s1", ["n1", "n2", "s1"]),
        ("gpu-[008-010,012]", ["gpu-008", "gpu-009", "gpu-010", "gpu-012"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("", []),
    ],
)
def test_host_lists_expand_in_order(hostlist, names) -> None:
    assert parse.expand_hostlist(hostlist) == names


@pytest.mark.parametrize(
    ("gres", "count", "indexes", "gpu_type"),
    [
        ("gpu:h100:3(IDX:2-4)", 3, [2, 3, 4], "h100"),
        ("gpu:h100:3(IDX:0-1,5)", 3, [0, 1, 5], "h100"),
        ("gpu:h100:8(S:0-1)", 8, [], "h100"),
        ("gpu:a100:4,gpu:v100:2", 6, [], "a100"),
        ("gpu:8,nic:1", 8, [], None),
        ("gres:gpu:3", 3, [], None),
        ("cpu=2,gres/gpu=4", 4, [], None),
        ("gpu:h100:0(IDX:N/A)", 0, [], "h100"),
        ("(null)", 0, [], None),
        (None, 0, [], None),
    ],
)
def test_gres_strings(gres, count, indexes, gpu_type) -> None:
    assert parse.gpu_count(gres) == count
    assert parse.gpu_indexes(gres) == indexes
    assert parse.gpu_type(gres) == gpu_type


def test_unreachable_controller_output_is_a_transient_error() -> None:
    # Slurm 22.05 exits 0 here, with an "errors" entry and no data.
    for name in ("sinfo_unreachable.json", "squeue_unreachable.json"):
        with pytest.raises(SchedulerError) as caught:
            parse.parse_json(text(name), name)
        assert caught.value.permanent is False
        assert "Unspecified error" in str(caught.value)


def test_output_that_is_not_json_is_a_permanent_error() -> None:
    with pytest.raises(SchedulerError, match="squeue --json: output is not JSON") as caught:
        parse.parse_json("squeue: invalid option -- 'json'", "squeue --json")
    assert caught.value.permanent


# -- nodes ---------------------------------------------------------------------------------------


def test_nodes_have_their_partition_as_pool_and_gres_as_gpus() -> None:
    nodes = {n["name"]: n for n in parse.parse_nodes(document("sinfo_drained.json"), SETTINGS)}

    assert {k: nodes["n1"][k] for k in ("pool", "gpu_model", "gpus", "state")} == {
        "pool": "gpu",
        "gpu_model": "H100-SXM5-80GB",
        "gpus": 8,
        "state": "ready",
    }
    assert (nodes["s1"]["pool"], nodes["s1"]["gpu_model"], nodes["s1"]["gpus"]) == (
        "small",
        "a100",
        4,
    )
    assert 0 <= nodes["n1"]["cpu_util"] <= 1


def test_a_drained_node_with_running_jobs_is_cordoned_and_drained_once_they_end() -> None:
    draining = parse.parse_nodes(document("sinfo_draining.json"), SETTINGS)
    drained = parse.parse_nodes(document("sinfo_drained.json"), SETTINGS)

    assert {n["name"]: n["state"] for n in draining}["s1"] == "cordoned"
    assert {n["name"]: n["state"] for n in drained}["s1"] == "drained"


@pytest.mark.parametrize(
    ("record", "state"),
    [
        ({"state": "idle", "state_flags": []}, "ready"),
        ({"state": "idle", "state_flags": ["NOT_RESPONDING"]}, "ready"),
        ({"state": "down", "state_flags": ["NOT_RESPONDING"]}, "down"),
        ({"state": "allocated", "state_flags": ["DRAIN"]}, "cordoned"),
        ({"state": "idle", "state_flags": ["DRAIN"]}, "drained"),
        ({"state": ["IDLE", "DRAIN"]}, "drained"),  # newer data parsers
        ({"state": "future"}, "down"),
    ],
)
def test_node_states(record, state) -> None:
    assert parse.node_state(record) == state


def test_configured_partitions_limit_the_nodes() -> None:
    settings = parse.ParseSettings(partitions=frozenset({"small"}))

    assert [n["name"] for n in parse.parse_nodes(document("sinfo_drained.json"), settings)] == [
        "s1"
    ]


# -- jobs ----------------------------------------------------------------------------------------


def test_a_running_job_has_its_gpu_indexes(jobs) -> None:
    single = job(jobs, "1")

    assert (single["state"], single["pods"], single["gpus_per_pod"], single["gang"]) == (
        "running",
        1,
        2,
        False,
    )
    assert single["allocation"] == [{"node": "n1", "gpus": [0, 1]}]
    assert (single["tenant"], single["queue"], single["pool"]) == ("team-a", "team-a", "gpu")
    assert single["started"] is not None
    assert single["ended"] is None


def test_a_multi_node_job_is_a_gang_of_one_pod_per_node(jobs) -> None:
    multi = job(jobs, "2")
    # Cross-check with the other output Slurm gives for the same job.
    detail = {
        node: parse.expand_indexes(indexes)
        for node, indexes in re.findall(
            r"Nodes=(\S+) .*GRES=gpu:h100:\d+\(IDX:([^)]*)\)", text("scontrol_show_job_multi.txt")
        )
    }

    assert (multi["pods"], multi["gpus_per_pod"], multi["gang"], multi["min_member"]) == (
        2,
        3,
        True,
        2,
    )
    assert {pod["node"]: pod["gpus"] for pod in multi["allocation"]} == detail
    assert detail == {"n1": [2, 3, 4], "n2": [0, 1, 2]}


# The recording's pending jobs (README.md) and the reason Slurm gives each.
PENDING_REASONS = {
    "3_4": "Resources",
    "3_5": "Resources",
    "4": "AssocGrpGRES",
    "5": "Dependency",
    "6": "Resources",
    "14": "ReqNodeNotAvail",
}


def test_pending_jobs_keep_slurms_reason_and_hold_nothing(jobs) -> None:
    reasons = {j["id"]: j["pending_reason"] for j in jobs.jobs if j["state"] == "pending"}

    assert reasons == PENDING_REASONS
    assert all(not j["allocation"] for j in jobs.jobs if j["state"] == "pending")
    big = job(jobs, "6")
    assert (big["pods"], big["gpus_per_pod"], big["gang"]) == (2, 8, True)


def test_array_tasks_expand_running_and_pending(jobs) -> None:
    tasks = {j["id"]: j["state"] for j in jobs.jobs if j["name"] == "arr"}

    assert tasks == {f"3_{n}": "running" if n < 4 else "pending" for n in range(6)}
    held = [pod["gpus"] for j in jobs.jobs if j["name"] == "arr" for pod in j["allocation"]]
    assert sorted(held) == [[0], [1], [2], [3]]


def test_array_expansion_has_a_limit() -> None:
    parsed = parse.parse_jobs(document("squeue.json"), parse.ParseSettings(array_expand_limit=1))

    assert [j["id"] for j in parsed.jobs if j["name"] == "arr" and j["state"] == "pending"] == [
        "3_4"
    ]
    assert parsed.truncated_arrays == ["3"]


def test_ended_jobs_map_to_completed_and_failed(jobs) -> None:
    states = {j["id"]: (j["state"], jobs.native[j["id"]]["native_state"]) for j in jobs.jobs}

    assert states["7"] == ("completed", "COMPLETED")
    assert states["8"] == ("failed", "FAILED")
    assert states["9"] == ("failed", "CANCELLED")
    assert job(jobs, "8")["ended"] is not None


@pytest.mark.parametrize(
    ("record", "shape"),
    [
        ({"node_count": 2, "tres_per_node": "gres:gpu:4"}, (2, 4)),
        ({"node_count": 1, "tres_per_job": "gres:gpu:2"}, (1, 2)),
        ({"node_count": 2, "tres_per_job": "gres:gpu:3"}, (3, 1)),
        ({"node_count": 2, "tres_per_task": "gres:gpu:1", "tasks": 8}, (2, 4)),
        ({"node_count": 1}, (1, 0)),
    ],
)
def test_requested_shapes(record, shape) -> None:
    assert slurm_jobs._requested_gpus(record, "gpu") == shape


def test_uneven_allocations_split_into_equal_pods() -> None:
    pods, size, allocation = slurm_jobs._split_pods([("n1", [0, 1, 2, 3]), ("n2", [5, 6])])

    assert (pods, size) == (3, 2)
    assert allocation == [
        {"node": "n1", "gpus": [0, 1]},
        {"node": "n1", "gpus": [2, 3]},
        {"node": "n2", "gpus": [5, 6]},
    ]


# -- partitions and accounts ---------------------------------------------------------------------


def test_partition_lln_is_the_placement() -> None:
    partitions = parse.parse_partitions(text("scontrol_show_partition.txt"))

    assert {name: parse.placement_of(p) for name, p in partitions.items()} == {
        "gpu": "binpack",
        "small": "spread",
    }
    assert partitions["gpu"]["Nodes"] == "n[1-2]"


def test_accounts_are_queues_with_fairshare_weight_and_gpu_limit() -> None:
    queues = parse.parse_queues(text("sshare.txt"), text("sacctmgr_associations.txt"))

    assert queues == [
        {"name": "team-a", "tenant": "team-a", "weight": 4.0},
        {"name": "team-b", "tenant": "team-b", "weight": 1.0, "capability_gpus": 4.0},
    ]


def test_a_scontrol_line_keeps_a_reason_with_spaces() -> None:
    pairs = parse.parse_key_values(text("scontrol_show_node_drained.txt"))

    assert pairs["State"] == "IDLE+DRAIN"
    assert pairs["Reason"].startswith("gpuobs: Xid 79 [root@")


# -- the whole scheduler part --------------------------------------------------------------------


def loaded(state):
    """The scheduler part ``state`` as a whole snapshot (cluster ``recorded``), loaded."""
    return snapshot_format.load(
        {
            "format": snapshot_format.FORMAT,
            "cluster": "recorded",
            "as_of": "2026-11-29T09:20:00Z",
            "scheduler": state.scheduler,
            "nodes": state.nodes,
            "gpus": state.gpus,
            "queues": state.queues,
            "jobs": state.jobs,
        }
    )


def test_recorded_state_is_a_valid_snapshot() -> None:
    state = scheduler_state(reads(), SETTINGS)
    snap = loaded(state)

    assert snap.total_gpus == 20
    assert len(snap.allocations) == 2 + 6 + 4
    assert snap.placement("small") == "spread"
    assert set(snap.queues.index) == {"team-a", "team-b"}


def test_without_accounting_tenants_seen_in_jobs_become_queues_of_weight_one() -> None:
    without = reads()
    without = SlurmReads(
        without.nodes_document, without.jobs, without.partitions, [], without.read_at
    )

    queues = scheduler_state(without, SETTINGS).queues

    assert queues == [
        {"name": "team-a", "tenant": "team-a", "weight": 1},
        {"name": "team-b", "tenant": "team-b", "weight": 1},
    ]


# -- events --------------------------------------------------------------------------------------

NOW = 1795944000


def derive(cursor: parse.EventCursor, sinfo: str = "sinfo_draining.json", now: int = NOW):
    return parse.derive_events(
        parse.parse_jobs(document("squeue.json"), SETTINGS), document(sinfo), cursor, now=now
    )


def test_pending_reasons_become_failed_scheduling_events_with_the_original_reason() -> None:
    events, _ = derive(parse.EventCursor())
    failed = {e["job"]: e for e in events if e["kind"] == "failed_scheduling"}

    assert {j: e["reason"] for j, e in failed.items()} == PENDING_REASONS
    assert failed["14"]["message"] == "ReqNodeNotAvail, UnavailableNodes:s1"
    assert failed["5"]["time"] == parse.epoch_time(NOW)


def test_a_pending_reason_is_reported_again_only_when_it_changes() -> None:
    _, cursor = derive(parse.EventCursor())
    changed = parse.EventCursor(cursor.time, {**cursor.pending, "6": "Priority"})

    again, _ = derive(changed, now=NOW + 60)

    assert [(e["job"], e["reason"]) for e in again if e["kind"] == "failed_scheduling"] == [
        ("6", "Resources")
    ]


def test_a_drain_is_a_node_drained_event_at_the_time_it_was_set() -> None:
    events, _ = derive(parse.EventCursor(), sinfo="sinfo_drained.json")
    drained = [e for e in events if e["kind"] == "node_drained"]
    record = next(n for n in document("sinfo_drained.json")["nodes"] if n["name"] == "s1")

    assert [(e["node"], e["reason"]) for e in drained] == [("s1", "gpuobs: Xid 79")]
    assert drained[0]["time"] == parse.epoch_time(record["reason_changed_at"])
    assert drained[0]["message"] == "node s1 drained by root: gpuobs: Xid 79"


def test_ended_jobs_are_events_with_slurms_state_as_reason() -> None:
    events, _ = derive(parse.EventCursor())
    ended = {e["job"]: e for e in events if e["kind"] in {"completed", "failed"}}

    assert {job: (e["kind"], e["reason"]) for job, e in ended.items()} == {
        "7": ("completed", "COMPLETED"),
        "8": ("failed", "FAILED"),
        "9": ("failed", "CANCELLED"),
    }
    assert ended["8"]["message"] == "job 8 ended FAILED (exit code 3:0)"


def test_a_job_cancelled_while_pending_never_started(jobs) -> None:
    events, _ = derive(parse.EventCursor())

    assert job(jobs, "9")["started"] is None
    assert not [e for e in events if e["kind"] == "started" and e["job"] == "9"]
    assert [e["job"] for e in events if e["kind"] == "started" and e["job"] in {"7", "8"}] == [
        "7",
        "8",
    ]


def test_the_cursor_skips_job_events_older_than_its_time() -> None:
    first, cursor = derive(parse.EventCursor())
    later = parse.EventCursor(time=NOW + 3600, pending=cursor.pending)

    again, _ = derive(later, now=NOW + 3600)

    assert any(e["kind"] == "submitted" for e in first)
    assert not [e for e in again if e["kind"] in {"submitted", "started", "completed", "failed"}]


def test_every_event_has_a_stable_dedup_key() -> None:
    first, _ = derive(parse.EventCursor())
    second, _ = derive(parse.EventCursor())

    keys = [e["dedup_key"] for e in first]
    assert len(keys) == len(set(keys))
    assert keys == [e["dedup_key"] for e in second]


def test_the_cursor_round_trips_and_a_garbled_one_starts_afresh() -> None:
    cursor = parse.EventCursor(time=NOW, pending={"6": "Resources"})

    assert parse.EventCursor.parse(cursor.dump()) == cursor
    assert parse.EventCursor.parse("not json") == parse.EventCursor()
    assert parse.EventCursor.parse(json.dumps({"v": 99})) == parse.EventCursor()


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"slurm_confg": "/etc/slurm/slurm.conf"}, "scheduler_config.slurm_confg"),
        ({"slurm_conf": "slurm.conf"}, "scheduler_config.slurm_conf"),
        ({"timeout_s": 0}, "scheduler_config.timeout_s"),
        ({"timeout_s": "10"}, "scheduler_config.timeout_s"),
        ({"accounting": "yes"}, "scheduler_config.accounting"),
        ({"partitions": ["gpu; rm -rf /"]}, "scheduler_config.partitions"),
        ({"gpu_models": ["h100"]}, "scheduler_config.gpu_models"),
    ],
)
def test_bad_config_is_a_permanent_error_naming_the_field(config, field) -> None:
    with pytest.raises(SchedulerError, match=re.escape(field)) as caught:
        SlurmSettings.from_config(config)
    assert caught.value.permanent


def test_config_defaults() -> None:
    settings = SlurmSettings.from_config({})

    assert (settings.timeout_s, settings.accounting, settings.slurm_conf) == (10.0, False, None)


# -- data parser v0.0.41 .. v0.0.44 (Slurm 24.05 .. 25.11) ---------------------------------------
# tests/fixtures/slurm/v0.0.4x/: documents shaped by SchedMD's published OpenAPI schemas (see the
# README there); the same cluster and jobs as the real 22.05 recording above.

LAYOUTS = ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44")


def layout(version: str, name: str) -> dict:
    return document(f"{version}/{name}")


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize(
    ("name", "root"),
    [
        ("squeue.json", "openapi_job_info_resp"),
        ("scontrol_show_nodes.json", "openapi_nodes_resp"),
        ("partitions.json", "openapi_partition_resp"),
    ],
)
def test_layout_fixtures_follow_schedmds_schemas(version, name, root) -> None:
    schemas = json.loads(text(f"{version}/openapi-schemas.json"))
    validator = jsonschema.Draft202012Validator({**schemas, "$ref": f"#/$defs/{version}_{root}"})
    fixture = layout(version, name)

    assert list(validator.iter_errors(fixture)) == []
    broken = json.loads(json.dumps(fixture))
    broken[next(iter(k for k in broken if k in {"jobs", "nodes", "partitions"}))][0]["name"] = 7
    assert list(validator.iter_errors(broken))  # the check can fail


@pytest.mark.parametrize("version", LAYOUTS)
@pytest.mark.parametrize("name", ["sinfo.json", "scontrol_show_nodes.json"])
def test_layout_nodes_parse_in_both_node_documents(version, name) -> None:
    nodes = {n["name"]: n for n in parse.parse_nodes(layout(version, name), SETTINGS)}

    assert {k: (n["pool"], n["gpu_model"], n["gpus"], n["state"]) for k, n in nodes.items()} == {
        "n1": ("gpu", "H100-SXM5-80GB", 8, "ready"),
        "n2": ("gpu", "H100-SXM5-80GB", 8, "ready"),
        "s1": ("small", "a100", 4, "cordoned"),  # ["MIXED", "DRAIN"]
    }
    assert nodes["n1"]["cpu_util"] == round(433 / 100 / 32, 4)


@pytest.mark.parametrize("version", LAYOUTS)
def test_layout_jobs_have_their_nodes_and_gpu_indexes(version) -> None:
    parsed = parse.parse_jobs(layout(version, "squeue.json"), SETTINGS)
    by_id = {j["id"]: j for j in parsed.jobs}

    assert by_id["1"]["allocation"] == [{"node": "n1", "gpus": [0, 1]}]
    assert by_id["2"]["allocation"] == [
        {"node": "n1", "gpus": [2, 3, 4]},
        {"node": "n2", "gpus": [0, 1, 2]},
    ]
    assert (by_id["2"]["pods"], by_id["2"]["gpus_per_pod"], by_id["2"]["gang"]) == (2, 3, True)
    assert [by_id[f"3_{t}"]["state"] for t in range(6)] == ["running"] * 2 + ["pending"] * 4
    assert (by_id["6"]["state"], by_id["6"]["pods"], by_id["6"]["gpus_per_pod"]) == (
        "pending",
        2,
        8,
    )
    assert by_id["6"]["pending_reason"] == "Resources"
    assert (by_id["7"]["state"], by_id["8"]["state"]) == ("completed", "failed")
    assert parsed.native["8"]["exit_code"] == 3 << 8
    assert parsed.refused == []


@pytest.mark.parametrize("version", LAYOUTS)
def test_layout_events_read_drains_from_the_sinfo_layout(version) -> None:
    events, _ = parse.derive_events(
        parse.parse_jobs(layout(version, "squeue.json"), SETTINGS),
        layout(version, "sinfo.json"),
        parse.EventCursor(),
        now=NOW,
    )
    drained = [e for e in events if e["kind"] == "node_drained"]

    assert [(e["node"], e["reason"], e["message"]) for e in drained] == [
        ("s1", "gpuobs: Xid 79", "node s1 draining by root: gpuobs: Xid 79")
    ]
    assert [e["message"] for e in events if e["job"] == "8" and e["kind"] == "failed"] == [
        "job 8 ended FAILED (exit code 3:0)"
    ]


def test_a_sinfo_entry_of_several_nodes_and_partitions_gives_one_record_per_node() -> None:
    entry = layout("v0.0.42", "sinfo.json")["sinfo"][0]
    grouped = {**entry, "nodes": {**entry["nodes"], "nodes": ["n1", "n2"], "total": 2}}
    again = {**grouped, "partition": {"name": "debug"}}

    records = parse.node_records({"sinfo": [grouped, again]})

    assert [(r["name"], r["partitions"]) for r in records] == [
        ("n1", ["gpu", "debug"]),
        ("n2", ["gpu", "debug"]),
    ]
    assert all("cpu_load" not in r for r in records)  # a group's load is nobody's own


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (["MIXED", "DRAIN", "NOT_RESPONDING"], "cordoned"),
        (["IDLE", "NOT_RESPONDING", "DRAIN"], "drained"),
        (["DOWN", "NOT_RESPONDING"], "down"),
        (["IDLE", "PLANNED"], "ready"),
    ],
)
def test_list_states_read_their_base_state_first(state, expected) -> None:
    assert parse.node_state({"state": state}) == expected


# -- bounded work on hostile records -------------------------------------------------------------


def _gpu_job_24_11() -> dict:
    """A 2-node GPU job in Slurm 24.11's layout with realistic per-node socket/core lists: the
    record that made the v0.0.38-only parser read ``job_resources`` as a host list (2.9 GB)."""
    record = json.loads(json.dumps(layout("v0.0.42", "squeue.json")["jobs"][1]))
    for node in record["job_resources"]["nodes"]["allocation"]:
        node["sockets"] = [
            {"index": s, "cores": [{"index": c, "status": ["ALLOCATED"]} for c in range(8)]}
            for s in range(2)
        ]
    return record


def _bounded(call) -> tuple[object, float, int]:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = call()
        return result, time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_24_11_gpu_job_with_core_lists_parses_in_bounded_time_and_memory() -> None:
    document = {"jobs": [_gpu_job_24_11()]}

    parsed, seconds, peak = _bounded(lambda: parse.parse_jobs(document, SETTINGS))

    assert [pod["node"] for pod in parsed.jobs[0]["allocation"]] == ["n1", "n2"]
    assert seconds < 1.0
    assert peak < 5 * 2**20


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"nodes": "n[1-99999999]", "job_resources": {"nodes": {"list": "n[1-99999999]"}}},
            "range",
        ),
        ({"nodes": "a[1-1000]b[1-1000]c[1-1000]", "job_resources": {}}, "more than"),
        ({"nodes": "n[[1-2]]", "job_resources": {}}, "not a host list"),
        ({"gres_detail": ["gpu:h100:3(IDX:0-4000000000)"]}, "past 1023"),
    ],
)
def test_hostile_host_and_index_lists_are_refused_not_expanded(change, why) -> None:
    record = {**_gpu_job_24_11(), **change}
    document = {"jobs": [record, layout("v0.0.42", "squeue.json")["jobs"][0]]}

    parsed, seconds, peak = _bounded(lambda: parse.parse_jobs(document, SETTINGS))

    assert [j["id"] for j in parsed.jobs] == ["1"]  # the others still read
    assert len(parsed.refused) == 1
    assert parsed.refused[0].startswith("job 2: ")
    assert why in parsed.refused[0]
    assert seconds < 1.0
    assert peak < 5 * 2**20


def test_a_huge_array_range_builds_no_more_than_its_limit() -> None:
    record = {**layout("v0.0.42", "squeue.json")["jobs"][4], "array_task_string": "0-4000000000"}

    parsed, seconds, peak = _bounded(
        lambda: parse.parse_jobs({"jobs": [record]}, parse.ParseSettings(array_expand_limit=10))
    )

    assert len(parsed.jobs) == 10
    assert parsed.truncated_arrays == ["3"]
    assert seconds < 1.0
    assert peak < 2**20


def test_an_object_is_never_read_as_text() -> None:
    assert parse.expand_hostlist(slurm_values.text_value({"count": 2, "list": "n[1-2]"})) == []
    with pytest.raises(parse.ExpansionError):
        parse.expand_hostlist(str({"count": 2, "list": "n[1-2]"}))


# -- GPU topology from gres.conf and topology.yaml -----------------------------------------------

GRES_CONF = """\
# DGX-like: two NVLink pairs per socket half, Links= per GPU (gres.conf(5))
AutoDetect=off
NodeName=n[1-2] Name=gpu Type=h100 File=/dev/nvidia1 Cores=0-15 Links=2,-1,0,0
NodeName=n[1-2] Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-15 Links=-1,2,0,0
NodeName=n[1-2] Name=gpu Type=h100 File=/dev/nvidia2 Cores=16-31 Links=0,0,-1,2
NodeName=n[1-2] Name=gpu Type=h100 File=/dev/nvidia3 Cores=16-31 Links=0,0,2,-1
NodeName=s1 Name=gpu Type=a100 File=/dev/nvidia[0-3] Cores=0-15
NodeName=n1 Name=nic File=/dev/mlx5_0
"""


def test_gres_conf_links_give_nvlink_domains_and_cores_give_sockets() -> None:
    conf = slurm_topology.parse_gres_conf(GRES_CONF)

    assert conf.problems == []
    assert slurm_topology.node_topology(conf.gpus_of("n1"), cores_per_socket=16) == {
        "nvlink_domains": [[0, 1], [2, 3]],
        "numa": [0, 0, 1, 1],
    }
    # No Links= (AutoDetect finds them itself): NVLink not judged; cores all on socket 0.
    assert slurm_topology.node_topology(conf.gpus_of("s1"), cores_per_socket=16) == {
        "numa": [0, 0, 0, 0]
    }
    assert slurm_topology.node_topology(conf.gpus_of("s1"), cores_per_socket=None) is None
    assert slurm_topology.node_topology(conf.gpus_of("unknown"), cores_per_socket=16) is None


def test_gres_conf_cores_across_sockets_leave_numa_unjudged() -> None:
    conf = slurm_topology.parse_gres_conf(
        "NodeName=g1 Name=gpu File=/dev/nvidia0 Cores=0-31 Links=-1,1\n"
        "NodeName=g1 Name=gpu File=/dev/nvidia1 Cores=0-31 Links=1,-1\n"
    )

    assert slurm_topology.node_topology(conf.gpus_of("g1"), cores_per_socket=16) == {
        "nvlink_domains": [[0, 1]]
    }


def test_hostile_gres_conf_lines_are_listed_not_expanded() -> None:
    text = "NodeName=n[1-99999999] Name=gpu File=/dev/nvidia0 Links=-1\n" * 3
    conf, seconds, peak = _bounded(lambda: slurm_topology.parse_gres_conf(text))

    assert conf.nodes == {}
    assert len(conf.problems) == 3
    assert seconds < 1.0
    assert peak < 5 * 2**20


def test_topology_yaml_blocks_and_topology_conf_blocks() -> None:
    yaml_text = (
        "- topology: nvl72\n  cluster_default: true\n  block:\n    block_sizes: [18]\n"
        "    blocks:\n      - block: rack1\n        nodes: n[01-18]\n"
        "      - block: rack2\n        nodes: n[19-36]\n- topology: flat\n  flat: true\n"
    )
    from_yaml = slurm_topology.parse_blocks(yaml_text, yaml_format=True)
    from_conf = slurm_topology.parse_blocks(
        "BlockName=rack1 Nodes=n[01-18]\nBlockName=rack2 Nodes=n[19-36]\nBlockSizes=18\n",
        yaml_format=False,
    )

    assert from_yaml == from_conf
    assert (len(from_yaml), from_yaml["n18"], from_yaml["n19"]) == (36, "rack1", "rack2")


def test_topology_reaches_the_snapshot_and_blocks_become_cliques() -> None:
    def links(i: int) -> str:
        return ",".join("-1" if j == i else ("4" if j // 4 == i // 4 else "0") for j in range(8))

    eight = "".join(
        f"NodeName=n1 Name=gpu File=/dev/nvidia{i} Cores={i // 4 * 16}-{i // 4 * 16 + 15} "
        f"Links={links(i)}\n"
        for i in range(8)
    )
    conf = slurm_topology.parse_gres_conf(eight + GRES_CONF.replace("n[1-2]", "n2"))
    base = reads()
    with_topology = SlurmReads(
        base.nodes_document,
        base.jobs,
        base.partitions,
        base.queues,
        base.read_at,
        topology={
            "n1": slurm_topology.node_topology(conf.gpus_of("n1"), 16),
            "n2": slurm_topology.node_topology(conf.gpus_of("n2"), 16),  # 4 GPUs of its 8
        },
        blocks={"n1": "rack1", "n2": "rack1"},
    )

    state = scheduler_state(with_topology, SETTINGS)
    nodes = {n["name"]: n for n in state.nodes}
    snap = loaded(state)

    assert nodes["n1"]["topology"] == {
        "nvlink_domains": [[0, 1, 2, 3], [4, 5, 6, 7]],
        "numa": [0, 0, 0, 0, 1, 1, 1, 1],
    }
    assert "topology" not in nodes["n2"]  # gres.conf disagrees with Slurm's count: not judged
    assert {(g["node"], g["nvlink_clique"]) for g in state.gpus} == {
        ("n1", "slurm-block:rack1"),
        ("n2", "slurm-block:rack1"),
    }
    assert len(state.gpus) == 16
    assert snap.total_gpus == 20


def test_the_files_beside_slurm_conf_are_read_when_there(tmp_path) -> None:
    (tmp_path / "gres.conf").write_text(GRES_CONF)
    (tmp_path / "topology.yaml").write_text(
        "- topology: t\n  block:\n    block_sizes: [2]\n    blocks:\n"
        "      - block: rack1\n        nodes: n[1-2]\n"
    )
    (tmp_path / "topology.conf").write_text("BlockName=ignored Nodes=n[1-2]\n")
    records = [{"name": "n1", "cores": 16}, {"name": "s1"}, {"name": "zz", "cores": 16}]

    found = slurm_topology.read_beside(tmp_path, records, nvlink_blocks=True)
    nothing = slurm_topology.read_beside(tmp_path / "absent", records, nvlink_blocks=True)

    assert found.topology == {"n1": {"nvlink_domains": [[0, 1], [2, 3]], "numa": [0, 0, 1, 1]}}
    assert found.blocks == {"n1": "rack1", "n2": "rack1"}  # topology.yaml wins, as in Slurm
    assert (nothing.topology, nothing.blocks, nothing.problems) == ({}, {}, [])


def test_refused_records_are_named_in_the_scheduler_section() -> None:
    hostile = {**_gpu_job_24_11(), "nodes": "n[[1-2]]", "job_resources": {}}
    jobs = parse.parse_jobs({"jobs": [hostile]}, SETTINGS)
    base = reads()

    state = scheduler_state(
        SlurmReads(base.nodes_document, jobs, base.partitions, base.queues, base.read_at),
        SETTINGS,
    )

    assert state.jobs == []
    assert state.refused == jobs.refused
    assert "not a host list" in state.refused[0]


def _running(job_id: str, *pods: tuple[str, list[int]]) -> dict:
    allocation = [{"node": node, "gpus": gpus} for node, gpus in pods]
    return {"id": job_id, "state": "running", "allocation": allocation}


def test_jobs_that_do_not_fit_the_nodes_read_are_left_out_and_named() -> None:
    parsed = slurm_jobs.ParsedJobs(
        jobs=[
            _running("1", ("n1", [0, 1])),
            _running("2", ("n1", [2]), ("gone", [0])),  # a node deleted between the reads
            _running("3", ("n1", [8])),  # past the node's 8 GPUs
            _running("4", ("n1", [1])),  # job 1 holds it
            _running("5", ("n1", [3])),
            {"id": "6", "state": "pending", "allocation": []},
        ],
        native={str(i): {} for i in range(1, 7)},
    )

    parse.refuse_inconsistent(parsed, {"n1": 8})

    assert [j["id"] for j in parsed.jobs] == ["1", "5", "6"]
    assert set(parsed.native) == {"1", "5", "6"}  # no events of a record left out
    assert parsed.refused == [
        "job 2: allocated on node 'gone', which the nodes read does not list",
        "job 3: holds GPU 8 of node 'n1', which has 8",
        "job 4: holds GPU n1/1, which job 1 holds too",
    ]


@pytest.mark.parametrize("target", ["job:1234\n", "job:1234\n--all", "job:gpu-1\r"])
def test_a_target_with_a_line_end_never_reaches_a_slurm_command(target) -> None:
    """Issue #28: ``SAFE_NAME`` ends in ``\\Z``, so ``job:1234\\n`` is refused, not requeued."""
    with pytest.raises(ChangeError, match="target must look like job:NAME"):
        target_name({"kind": "gang-release", "target": target}, pattern=SAFE_NAME)
