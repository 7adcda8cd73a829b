from editor.buffer import Buffer

__all__ = ["Buffer"]
