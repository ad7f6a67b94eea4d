"""The plan's measured-demand tests read the review's simulated week: its fixtures, shared."""

from tests.review.conftest import vm_week, week

__all__ = ["vm_week", "week"]
