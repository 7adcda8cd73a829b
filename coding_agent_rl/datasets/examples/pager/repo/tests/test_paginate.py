import pytest

from pager import page_count, paginate


def test_page_count_rounds_up():
    assert page_count(10, 3) == 4


def test_page_count_of_empty_sequence_is_one():
    assert page_count(0, 5) == 1


def test_page_count_rejects_zero_per_page():
    with pytest.raises(ValueError):
        page_count(3, 0)


@pytest.mark.parametrize("number", [0, 5])
def test_out_of_range_page(number):
    with pytest.raises(ValueError):
        paginate(list(range(10)), number, 3)


def test_navigation_flags():
    first = paginate(list(range(10)), 1, 3)
    last = paginate(list(range(10)), 4, 3)
    assert first.has_next and not first.has_previous
    assert last.has_previous and not last.has_next
