"""The version of perfetto-service, as the service reports it and `traced --version` prints it."""

from __future__ import annotations

import functools

__all__ = ["service_version"]


@functools.cache
def service_version() -> str:
    """This distribution's version, `X.Y.Z`.

    Read when first asked for, not at import: importlib.metadata (with email, zipfile and csv)
    costs tens of milliseconds to load.
    """
    from importlib.metadata import version

    return version("perfetto-service")
