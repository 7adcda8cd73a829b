from legend.colors import STATUS_COLORS, rgb

__all__ = ["STATUS_COLORS", "rgb"]
