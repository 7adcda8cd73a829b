from daterange.ranges import DateRange, merge

__all__ = ["DateRange", "merge"]
