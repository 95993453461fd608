"""The hypothesis settings of every fuzz test."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# No deadline (a loaded machine is not a bug); no example database, so a fuzz run leaves
# no files in the working tree. Fuzz inputs are large and mostly filtered by design.
FUZZ = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


def fuzz(examples: int) -> settings:
    """:data:`FUZZ` with ``examples`` examples."""
    return settings(FUZZ, max_examples=examples)
