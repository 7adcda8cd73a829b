"""Small text helpers."""

from textkit.case import camel_to_snake
from textkit.slug import slugify

__all__ = ["camel_to_snake", "slugify"]
