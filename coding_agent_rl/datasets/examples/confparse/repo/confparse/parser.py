class ConfigError(ValueError):
    pass


def _value(raw: str, lineno: int) -> str:
    raw = raw.strip()
    if raw[:1] in ("'", '"'):
        quote = raw[0]
        if len(raw) < 2 or not raw.endswith(quote):
            raise ConfigError(f"line {lineno}: unterminated quoted value")
        return raw[1:-1]
    return raw


def parse(text: str) -> dict[str, str]:
    """Parse ``key = value`` lines. ``#`` starts a comment (outside quotes); blank lines are
    ignored; a value may be wrapped in single or double quotes to keep spaces."""
    result: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise ConfigError(f"line {lineno}: expected 'key = value'")
        key, raw = line.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"line {lineno}: empty key")
        result[key] = _value(raw, lineno)
    return result
