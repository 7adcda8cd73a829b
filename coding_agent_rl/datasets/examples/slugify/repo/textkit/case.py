import re

_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def camel_to_snake(name: str) -> str:
    """``HTTPServerError`` -> ``http_server_error``."""
    return _BOUNDARY.sub("_", name).lower()
