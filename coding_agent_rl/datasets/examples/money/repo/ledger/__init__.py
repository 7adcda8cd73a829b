from ledger.money import format_cents, split, to_cents

__all__ = ["format_cents", "split", "to_cents"]
