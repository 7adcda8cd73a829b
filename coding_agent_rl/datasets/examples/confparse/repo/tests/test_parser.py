import pytest

from confparse import ConfigError, parse


def test_key_values():
    assert parse("a = 1\nb=two") == {"a": "1", "b": "two"}


def test_comments_and_blank_lines():
    assert parse("# header\n\nname = x  # trailing\n") == {"name": "x"}


def test_quoted_value_keeps_spaces():
    assert parse('greeting = "  hi there "') == {"greeting": "  hi there "}


def test_value_may_contain_equals():
    assert parse("url = http://x/?a=b") == {"url": "http://x/?a=b"}


@pytest.mark.parametrize("text", ["just words", " = value", 'k = "open'])
def test_errors(text):
    with pytest.raises(ConfigError):
        parse(text)
