"""The foreign keys gpuobs declares again and again, each declared once.

A row that points at another only for the record (who acknowledged an incident, which finding
an owner notice was about) keeps itself when that other row goes: the key is emptied
(``SET_NULL``), never the row deleted with it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


def optional_ref(
    to: type[models.Model] | str, *, related_name: str = "+", help_text: str = ""
) -> models.ForeignKey:
    """A nullable foreign key to ``to``, emptied when the row it points at is deleted."""
    return models.ForeignKey(
        to,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name=related_name,
        help_text=help_text,
    )


def user_ref(help_text: str = "") -> models.ForeignKey:
    """Who did something (approved, acknowledged, uploaded): a user, empty once they are gone or
    when gpuobs itself did it. No reverse accessor on the user."""
    return optional_ref(settings.AUTH_USER_MODEL, help_text=help_text)
