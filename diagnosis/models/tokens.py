"""API tokens kept as hashes, with an expiry and the time of last use (issue #12).

The token itself is shown once, when it is made (``manage.py api_token create``); the database
keeps its SHA-256 only, so a copy of the database lets nobody call the API. DRF's plain
``authtoken`` tokens of existing clients still work until ``manage.py api_token
migrate-legacy`` moves each into a hashed row (same secret: clients change nothing) and deletes
the plain one.

A token also names what its machine may write: ``clusters`` and ``kinds``
(:class:`~diagnosis.choices.SenderKind`: topology uploads, scheduler events, Alertmanager alerts).
The sender endpoints accept only such a token, and only for those clusters and kinds; neither a
model permission nor the staff flag grants anything there
(``diagnosis.access.clusters_for_sender``).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=64, help_text="What the token is for (the machine).")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=8, editable=False, help_text="To recognize it by.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    clusters = models.ManyToManyField(
        "diagnosis.Cluster",
        blank=True,
        related_name="sender_tokens",
        help_text="The clusters this token may write to (with one of its kinds).",
    )
    kinds = models.JSONField(
        default=list, blank=True, help_text="What it may write there: topology, events, alerts."
    )

    class Meta:
        ordering = ["user", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) of {self.user}"

    @classmethod
    def issue(
        cls, user: object, name: str, *, days: int | None = 90, key: str | None = None
    ) -> tuple[ApiToken, str]:
        """A new token for ``user``: the row and the secret (shown once, never stored)."""
        key = key or secrets.token_hex(20)
        expires = timezone.now() + timedelta(days=days) if days else None
        row = cls.objects.create(
            user=user, name=name, digest=token_digest(key), prefix=key[:8], expires_at=expires
        )
        return row, key

    def may_send(self, kind: str) -> bool:
        """Whether the token names ``kind`` (a :class:`~diagnosis.choices.SenderKind`)."""
        return isinstance(self.kinds, list) and kind in self.kinds

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()
