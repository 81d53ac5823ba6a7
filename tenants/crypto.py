"""Encryption at rest for API secrets (Fernet; keys from settings)."""

from __future__ import annotations

import base64
import functools

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


def _derived_key(secret_key: str) -> bytes:
    # HKDF with a fixed, purpose-specific info string: the Fernet key never equals SECRET_KEY
    # and a future second purpose can derive an unrelated key from the same secret.
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"memoryplatform/api-secrets")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


@functools.cache
def _fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    material = [k.encode() for k in keys] if keys else [_derived_key(secret_key)]
    return MultiFernet([Fernet(k) for k in material])


def fernet() -> MultiFernet:
    return _fernet(tuple(settings.SECRETS_ENCRYPTION_KEYS), settings.SECRET_KEY)


def encrypt(plaintext: str) -> str:
    return fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    """Raises `InvalidToken` when the settings key cannot open it (e.g. SECRET_KEY changed)."""
    return fernet().decrypt(token.encode()).decode()


__all__ = ["InvalidToken", "decrypt", "encrypt"]
