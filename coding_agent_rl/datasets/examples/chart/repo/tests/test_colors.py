from legend import STATUS_COLORS, rgb


def test_every_status_has_a_colour():
    assert set(STATUS_COLORS) == {"ok", "warn", "error"}


def test_ok_is_green():
    r, g, b = rgb("ok")
    assert g > r and g > b
