"""Name filters from configs (producer_name_filter / producer_name_regex_filter and the like).

Regexes come from consumers and are matched against names producers chose, on the loop every
client shares: they run on RE2 (google-re2), whose matching time is linear in the name's
length whatever the pattern, so that no pattern (such as `(a+)+b`) can stall the service.
A regex matches the whole name, as upstream's (RE2 syntax: no backreferences or lookaround).
A pattern RE2 cannot compile matches nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import re2

__all__ = ["name_matches"]

_log = logging.getLogger("perfetto_service")


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # said once by _compiled, not by RE2 on stderr


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re2._Regexp | None:
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else b""
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        _log.warning("regex %r matches nothing: RE2 cannot compile it (%s)", pattern, reason)
        return None


def name_matches(name: str, names: Sequence[str], patterns: Sequence[str]) -> bool:
    """Whether `name` is one of `names` or wholly matches one of the regexes `patterns`."""
    if name in names:
        return True
    for pattern in patterns:
        regex = _compiled(pattern)
        if regex is not None and regex.fullmatch(name) is not None:
            return True
    return False
