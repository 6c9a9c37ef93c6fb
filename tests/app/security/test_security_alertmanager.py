"""Issue #12, defect 6: the Alertmanager receiver answers every hostile alert with a reason,
never a 500, and stores the good alerts of a batch whatever its bad ones hold."""

from __future__ import annotations

import json

import pytest
from django.test import TestCase

from diagnosis.models import InboundAlertBatch, Incident
from tests.app.oncall.test_alertmanager import (
    _tasks_in_process,
    alert,
    bearer,
    payload,
    prod,
    reporter,
)

pytestmark = pytest.mark.django_db
__all__ = ["_tasks_in_process", "prod", "reporter"]  # fixtures used by name

HOSTILE = {
    "superscript-xid": {"err_code": "²"},
    "gpu-out-of-range": {"gpu": "99999"},
    "xid-above-2^31": {"err_code": str(2**31)},
    "long-hostname": {"Hostname": "n" * 254},
    "nul-in-a-label": {"err_msg": "bad\x00label"},
    "lone-surrogate": {"err_msg": "bad\ud800label"},
}


def deliver(client, body):
    # json.dumps escapes a lone surrogate as \ud800, as a hostile sender would send it
    with TestCase.captureOnCommitCallbacks(execute=True):
        return client.post(
            "/api/v1/alertmanager", json.dumps(body), content_type="application/json"
        )


def outcomes_of(response) -> list[dict]:
    batch = response.json()["batch"]
    return InboundAlertBatch.objects.get(pk=batch).results if batch else response.json()["alerts"]


@pytest.mark.parametrize("labels", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_alert_is_rejected_and_the_rest_of_its_batch_stored(prod, reporter, labels):
    bad = alert(**labels)
    bad["fingerprint"] = "bad0000000000001"
    good = alert(gpu="4")
    good["fingerprint"] = "good000000000001"
    response = deliver(bearer(reporter), payload(bad, good))
    assert response.status_code == 202
    outcomes = [a["outcome"] for a in outcomes_of(response)]
    if labels == {"err_code": "²"}:  # no number: an Xid alert by name, of unknown code
        assert outcomes == ["opened", "opened"]
    else:
        assert outcomes == ["rejected", "opened"]
        assert outcomes_of(response)[0]["errors"]
    assert Incident.objects.filter(cluster=prod, gpu_index=4).count() == 1


@pytest.mark.parametrize("key", ["startsAt", "endsAt"])
def test_an_alert_of_year_9999_is_rejected_not_a_500(prod, reporter, key):
    bad = alert()
    bad[key] = "9999-12-31T23:59:59Z"
    response = deliver(bearer(reporter), payload(bad))
    assert response.status_code == 202
    assert response.json()["alerts"][0]["outcome"] == "rejected"
    assert not Incident.objects.filter(cluster=prod).exists()


def test_an_overlong_fingerprint_is_rejected(prod, reporter):
    bad = alert()
    bad["fingerprint"] = "f" * 200
    response = deliver(bearer(reporter), payload(bad))
    assert response.status_code == 202
    assert response.json() == {"batch": None, "alerts": [response.json()["alerts"][0]]}
    assert response.json()["alerts"][0]["outcome"] == "rejected"
    assert not Incident.objects.filter(cluster=prod).exists()
