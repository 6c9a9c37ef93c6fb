"""Request bodies of the machine API, parsed at the boundary with errors that name each field."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from diagnosis.choices import SchedulerEventKind

MAX_EVENTS_PER_BATCH = 5000


class SchedulerEventSerializer(serializers.Serializer):
    """One event in the snapshot's normalized shape (DESIGN.md section 4, ``events[]``).

    ``id`` is the scheduler's own event id: an event posted twice with one id is stored once.
    Without it, an event is keyed by its content (time, kind, job, node, reason, message).
    """

    time = serializers.DateTimeField()
    kind = serializers.ChoiceField(choices=SchedulerEventKind.choices)
    job = serializers.CharField(max_length=255, required=False, allow_blank=True, allow_null=True)
    node = serializers.CharField(max_length=253, required=False, allow_blank=True, allow_null=True)
    reason = serializers.CharField(
        max_length=255, required=False, allow_blank=True, allow_null=True
    )
    message = serializers.CharField(
        max_length=10_000, required=False, allow_blank=True, allow_null=True
    )
    id = serializers.CharField(max_length=200, required=False, allow_blank=False)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        """Also refuse unknown fields (a typo must not pass silently) and times without a zone;
        every problem of the event is reported at once."""
        extra: dict[str, list[str]] = {}
        if isinstance(data, dict):
            extra = {key: ["unknown field"] for key in data if key not in self.fields}
            raw = data.get("time")
            if isinstance(raw, str) and not _has_zone(raw):
                extra["time"] = ["needs a time zone (e.g. 2026-11-29T08:00:00Z)"]
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if extra and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**extra, **exc.detail}) from None
            raise
        if extra:
            raise serializers.ValidationError(extra)
        return value


def _has_zone(text: str) -> bool:
    tail = text.strip()[10:]
    return tail.endswith(("Z", "z")) or "+" in tail or "-" in tail


class EventBatchSerializer(serializers.Serializer):
    events = serializers.ListField(
        child=SchedulerEventSerializer(),
        allow_empty=False,
        max_length=MAX_EVENTS_PER_BATCH,
    )

    def normalized(self) -> list[dict[str, Any]]:
        """The events as ``record_scheduler_events`` takes them."""
        events = []
        for event in self.validated_data["events"]:
            row = {key: event.get(key) for key in ("time", "kind", "job", "node", "reason")}
            row["message"] = event.get("message")
            if event.get("id"):
                row["dedup_key"] = f"api:{event['id']}"
            events.append(row)
        return events
