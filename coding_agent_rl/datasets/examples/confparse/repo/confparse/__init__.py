from confparse.parser import ConfigError, parse

__all__ = ["ConfigError", "parse"]
