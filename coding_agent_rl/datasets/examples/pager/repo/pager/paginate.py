import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Page:
    items: list[Any]
    number: int
    total_pages: int

    @property
    def has_next(self) -> bool:
        return self.number < self.total_pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def page_count(total: int, per_page: int) -> int:
    """How many pages ``total`` items fill; an empty sequence still has one (empty) page."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return max(1, math.ceil(total / per_page))


def paginate(items: Sequence[Any], number: int, per_page: int) -> Page:
    """Page ``number`` (1-based) of ``items``, ``per_page`` items per page."""
    total_pages = page_count(len(items), per_page)
    if not 1 <= number <= total_pages:
        raise ValueError(f"page {number} out of range 1..{total_pages}")
    start = (number - 1) * per_page
    end = start + per_page - 1
    return Page(list(items[start:end]), number, total_pages)
