"""Issue #12, defect 7 at the boundary: scheduler-supplied strings gpuobs cannot store are
repaired (and said so) before the snapshot enters the core."""

from __future__ import annotations

import json

import pytest

from diagnosis.edge.sanitize import clean_document, clip_identifier, json_text_clean


def doc(**job):
    return {
        "jobs": [{"id": "j", "name": "n", **job}],
        "events": [{"kind": "submitted", "job": job.get("id", "j")}],
    }


def test_a_long_job_id_is_clipped_the_same_way_wherever_it_appears():
    long_id = "ns-" + "a" * 60 + "/" + "b" * 253
    cleaned, problems = clean_document(doc(id=long_id))
    clipped = cleaned["jobs"][0]["id"]
    assert len(clipped) == 255
    assert cleaned["events"][0]["job"] == clipped
    assert problems == [
        "jobs[0].id: 317 characters clipped to 255",
        "events[0].job: 317 characters clipped to 255",
    ]


def test_two_long_ids_sharing_their_start_stay_two_ids():
    start = "x" * 300
    assert clip_identifier(start + "1", 255) != clip_identifier(start + "2", 255)


def test_nul_and_lone_surrogates_are_replaced():
    cleaned, problems = clean_document(doc(name="bad\x00name", tenant="t\ud800"))
    assert cleaned["jobs"][0]["name"] == "bad\ufffdname"
    assert cleaned["jobs"][0]["tenant"] == "t\ufffd"
    assert len(problems) == 2


def test_a_clean_document_is_unchanged():
    original = doc(tenant="team-a")
    assert clean_document(original) == (original, [])


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        (json.dumps({"name": "team-a é ✓"}).encode(), True),
        (json.dumps({"name": "team-a é ✓"}, ensure_ascii=False).encode(), True),
        (json.dumps({"name": "bad\x00name"}).encode(), False),  # the escape \u0000
        (json.dumps({"name": "t\ud800"}).encode(), False),  # the escape \ud800
        ('{"name": "t\ud800"}'.encode("utf-8", "surrogatepass"), False),  # encoded as UTF-8
        ('{"name": "t"}'.encode("utf-16"), False),
    ],
    ids=["escaped", "utf-8", "nul-escape", "surrogate-escape", "surrogate-bytes", "utf-16"],
)
def test_json_text_clean_answers_false_for_text_that_can_decode_to_a_bad_string(text, clean):
    assert json_text_clean(text) is clean


def test_text_found_clean_is_not_walked_but_still_clipped():
    long_id = "ns/" + "a" * 300
    text = json.dumps(doc(id=long_id)).encode()
    assert json_text_clean(text)
    walked = clean_document(json.loads(text))
    assert clean_document(json.loads(text), text_clean=True) == walked
    assert len(walked[0]["jobs"][0]["id"]) == 255
