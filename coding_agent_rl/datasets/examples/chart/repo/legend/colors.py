"""Dashboard status colours (see docs/legend.png for the design)."""

STATUS_COLORS = {
    "ok": "#2ca02c",
    "warn": "#ff7f0e",
    "error": "#1f77b4",
}


def rgb(name):
    """The status colour as an (r, g, b) tuple."""
    value = STATUS_COLORS[name].lstrip("#")
    return tuple(int(value[i : i + 2], 16) for i in (0, 2, 4))
