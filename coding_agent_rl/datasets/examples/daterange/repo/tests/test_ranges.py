from datetime import date

import pytest

from daterange import DateRange, merge


def d(day: int) -> date:
    return date(2024, 1, day)


def test_length_counts_both_ends():
    assert len(DateRange(d(1), d(5))) == 5


def test_end_before_start_is_rejected():
    with pytest.raises(ValueError):
        DateRange(d(5), d(1))


def test_membership():
    r = DateRange(d(2), d(4))
    assert d(2) in r and d(4) in r and d(5) not in r


def test_clear_overlap():
    assert DateRange(d(1), d(10)).overlaps(DateRange(d(5), d(15)))


def test_disjoint_ranges_do_not_overlap():
    assert not DateRange(d(1), d(3)).overlaps(DateRange(d(5), d(7)))


def test_merge_joins_back_to_back_ranges():
    merged = merge([DateRange(d(5), d(7)), DateRange(d(1), d(4)), DateRange(d(10), d(12))])
    assert merged == [DateRange(d(1), d(7)), DateRange(d(10), d(12))]
