"""``manage.py ensure_admin``: make sure the superuser ``admin`` exists (idempotent)."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Create the superuser 'admin' if it is missing, with GPUOBS_ADMIN_PASSWORD or a generated "
        "password printed once. An existing admin is left as it is."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options) -> None:
        users = get_user_model()
        if users.objects.filter(username=username).exists():
            self.stdout.write(
                f"gpuobs: user {username!r} exists; password unchanged "
                f"(change it with: python manage.py changepassword {username})"
            )
            return
        password = settings.GPUOBS_ADMIN_PASSWORD
        if password:
            try:  # the same validators as every other password (AUTH_PASSWORD_VALIDATORS)
                validate_password(password, users(username=username))
            except ValidationError as exc:
                raise CommandError(
                    "GPUOBS_ADMIN_PASSWORD is refused: " + " ".join(exc.messages)
                ) from None
            users.objects.create_superuser(username=username, email="", password=password)
            self.stdout.write(f"gpuobs: created {username!r} with GPUOBS_ADMIN_PASSWORD")
            return
        password = secrets.token_urlsafe(12)
        users.objects.create_superuser(username=username, email="", password=password)
        self.stdout.write(
            self.style.SUCCESS(
                f"gpuobs: created {username!r} — log in with username {username} and password "
                f"{password} (shown only this once)"
            )
        )
