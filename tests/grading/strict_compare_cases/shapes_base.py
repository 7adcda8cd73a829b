"""The repository's module at its base (the diff changes ``overlaps`` only)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    lo: int
    hi: int

    def __contains__(self, x):
        return self.lo <= x <= self.hi

    def overlaps(self, other):
        return self.lo < other.hi and other.lo < self.hi


@dataclass
class Box:
    """Unchanged by the diff: its == is trusted; what it holds is checked."""

    content: object
