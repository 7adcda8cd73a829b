import pytest

from ledger import format_cents, split, to_cents


@pytest.mark.parametrize("amount, cents", [("1.50", 150), (2, 200), ("0.1", 10), (19.99, 1999)])
def test_to_cents_exact(amount, cents):
    assert to_cents(amount) == cents


def test_split_spreads_remainder():
    assert split(100, 3) == [34, 33, 33]
    assert sum(split(1001, 7)) == 1001


def test_split_rejects_zero_parts():
    with pytest.raises(ValueError):
        split(10, 0)


@pytest.mark.parametrize("cents, text", [(123456, "$1,234.56"), (-5, "-$0.05"), (0, "$0.00")])
def test_format(cents, text):
    assert format_cents(cents) == text
