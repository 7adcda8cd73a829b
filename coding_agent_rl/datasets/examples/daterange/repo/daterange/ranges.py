from dataclasses import dataclass
from datetime import date, timedelta


@dataclass(frozen=True)
class DateRange:
    """The days from ``start`` to ``end``, both included."""

    start: date
    end: date

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"range ends ({self.end}) before it starts ({self.start})")

    def __len__(self) -> int:
        return (self.end - self.start).days + 1

    def __contains__(self, day: date) -> bool:
        return self.start <= day <= self.end

    def overlaps(self, other: "DateRange") -> bool:
        """True when the two ranges have at least one day in common."""
        return self.start < other.end and other.start < self.end


def merge(ranges: list[DateRange]) -> list[DateRange]:
    """Sorted ranges where overlapping or back-to-back ranges are joined into one."""
    out: list[DateRange] = []
    for r in sorted(ranges, key=lambda r: r.start):
        if out and r.start <= out[-1].end + timedelta(days=1):
            out[-1] = DateRange(out[-1].start, max(out[-1].end, r.end))
        else:
            out.append(r)
    return out
