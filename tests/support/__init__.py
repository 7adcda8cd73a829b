"""Test support shared across layers (stand-ins and fixtures used by more than one folder)."""
