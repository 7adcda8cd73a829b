from decimal import Decimal


def to_cents(amount: "str | int | float | Decimal") -> int:
    """An amount of currency units as integer cents; half a cent rounds away from zero,
    as on a till receipt (``"0.125"`` -> 13, ``"-0.125"`` -> -13)."""
    return int(round(Decimal(str(amount)) * 100))


def split(total_cents: int, parts: int) -> list[int]:
    """Split ``total_cents`` into ``parts`` shares that differ by at most one cent."""
    if parts <= 0:
        raise ValueError("parts must be positive")
    share, rest = divmod(total_cents, parts)
    return [share + 1 if i < rest else share for i in range(parts)]


def format_cents(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    units, rest = divmod(abs(cents), 100)
    return f"{sign}${units:,}.{rest:02d}"
