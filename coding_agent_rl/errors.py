"""Errors shared across layers."""


class UserError(Exception):
    """Bad input from the user: the CLI prints it as one line and exits 2."""
