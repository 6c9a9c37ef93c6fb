"""Issue #29, item 7: the API answers JSON in every state. A database that refuses the
statement (here: the clusters table locked by another session, the test's own session giving up
after 200 ms, a real OperationalError from PostgreSQL) is a 503 with ``Retry-After``, never
Django's HTML 500 page; pages keep their HTML error page."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.faults.conftest import own_connection
from tests.support.world import logged_in_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_api_answers_json_when_the_database_refuses(bob, make_cluster) -> None:
    make_cluster("demo")
    client = logged_in_client(bob)
    client.raise_request_exception = False  # answer as the server would, not raise in the test
    with own_connection() as holder:
        holder.execute('LOCK TABLE "diagnosis_cluster" IN ACCESS EXCLUSIVE MODE')
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            response = client.get("/api/v1/clusters/")
            page = client.get("/clusters/demo/")
        finally:
            holder.rollback()
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")

    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "the database is unavailable; try again shortly"}
    assert response["Retry-After"] == "10"
    assert page.status_code == 500
    assert "json" not in page["Content-Type"]
