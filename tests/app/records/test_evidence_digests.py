"""The findings step's evidence digest: the values stored rows were written with (recorded at
4ea663f). A change to it rewrites every open finding once (~103,000 rows at 131,072 GPUs)."""

import numpy as np
import pytest

from diagnosis.actions.records import findings as findings_module
from diagnosis.actions.records.findings import evidence_digests
from diagnosis.core.rules.base import Finding
from diagnosis.core.text import Text

# each evidence with the digest the one-at-a-time digest of 4ea663f gave it
ODD_EVIDENCE = [
    ({"runtime_s": 0}, "041036da44906bd91042e45bacff05e0"),
    ({"runtime_s": 59.9, "wait_s": 60.0, "hold_s": 61.0}, "64c807d346d189042b04b9919fc578d9"),
    ({"wait_s": -5, "queue": "训练-a"}, "cd6fe2c1a6a1437ed0b9e0af4a8b1d8d"),
    (
        {"nested": {"runtime_s": 1e7, "list": [{"hold_s": 3600.5}, {"hold_s": 1.5e-3}]}},
        "a7e536ffdee7635a7c3588fba338b854",
    ),
    (
        {"wait_s": 123456789012.0, "note": 'line one\nline two "quoted" wait_s'},
        "e27be5e45c6b093d24f28663ed424690",
    ),
    (
        {"runtime_s": np.float64(7200.25), "gpus": np.int64(8), 3: "int key"},
        "3396b9f79328e029815aded9be86ca57",
    ),
    ({"text_like": '"wait_s":99', "runtime_s_other": 5000}, "a8868fd9cca1352c3820e301d9124ab9"),
    ({}, "4810919f877f8bd955c319ecbe86ede9"),
    ({"wait_s": 86400 * 30, "values": [1, 2.5, None, True]}, "25e1f1c820e5d134ae20dbc41f6559c5"),
    ({"runtime_s": 1.0000000001e3}, "567d4f56a4d4a399445072633e37fed1"),
]
TEMPLATE_DIGEST = "944de57b7c123dee43cb7be27333cf31"


def odd_hits() -> list[Finding]:
    hits = [
        Finding("starvation", f"job:{i}", ("info", "warning", "critical")[i % 3], f"s {i}", ev)
        for i, (ev, _digest) in enumerate(ODD_EVIDENCE)
    ]
    text = Text("x.key", {"a": 1})
    hits.append(Finding.of_text("starvation", "job:t", "warning", text, {"wait_s": 900}))
    return hits


def test_digests_are_those_stored_rows_were_written_with():
    expected = [digest for _evidence, digest in ODD_EVIDENCE] + [TEMPLATE_DIGEST]
    assert evidence_digests(odd_hits()) == expected


def test_a_clock_duration_counts_in_quarter_steps():
    def waited(seconds: float) -> str:
        return evidence_digests([Finding("starvation", "job:1", "", "", {"wait_s": seconds})])[0]

    assert waited(3600) == waited(3601)
    assert waited(3600) != waited(3600 * 1.6)


@pytest.mark.parametrize("position", range(len(ODD_EVIDENCE) + 1))
def test_a_hit_digests_alone_as_in_a_batch(position):
    hits = odd_hits()
    assert evidence_digests([hits[position]]) == [evidence_digests(hits)[position]]


def test_no_hits_no_digests():
    assert evidence_digests([]) == []


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_the_digests_are_the_same_whatever_the_chunk_they_are_made_in(chunk, monkeypatch):
    """Made a chunk at a time (#35: the texts of 103,000 hits at once were written into memory
    shared with the snapshot's forked child); a chunk's edge cuts no hit's text."""
    monkeypatch.setattr(findings_module, "DIGEST_CHUNK", chunk)
    expected = [digest for _evidence, digest in ODD_EVIDENCE] + [TEMPLATE_DIGEST]
    assert evidence_digests(odd_hits()) == expected
