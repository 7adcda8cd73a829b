import pytest

from textkit import camel_to_snake, slugify


def test_simple_words():
    assert slugify("Hello World") == "hello-world"


def test_accents_are_folded():
    assert slugify("Café Crème") == "cafe-creme"


def test_leading_and_trailing_separators_are_stripped():
    assert slugify(" hello ") == "hello"


def test_custom_separator():
    assert slugify("a b", sep="_") == "a_b"


@pytest.mark.parametrize(
    "name, expected",
    [("HTTPServerError", "http_server_error"), ("camelCase", "camel_case"), ("simple", "simple")],
)
def test_camel_to_snake(name, expected):
    assert camel_to_snake(name) == expected
