"""The settings ember-checked reads from the environment, in the table ``ember settings`` shows.

| variable              | meaning                                                  | default |
|-----------------------|----------------------------------------------------------|---------|
| EMBER_CHECKED_DEVICES | how many devices (checked:0, checked:1, ...) it offers   | 2       |

Read through ember's own readers (``ember.config.env_int``), so a bad value gets ember's kind of
error, and ``check()`` lets ``ember settings`` and ``ember doctor`` report it before a device is opened.
"""

from __future__ import annotations

from ember.config import env_int, read_errors

__all__ = ["devices", "check"]


def devices() -> int:
    """How many devices the backend offers (``EMBER_CHECKED_DEVICES``; two by default, so device-mismatch
    paths can be exercised without hardware)."""
    return env_int("EMBER_CHECKED_DEVICES", 2, what="a number of devices", example="2", minimum=1)


def check() -> list[str]:
    """The values set now that these readers refuse (for ``ember settings``)."""
    return read_errors([devices])
