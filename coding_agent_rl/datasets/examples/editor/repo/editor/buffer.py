class Buffer:
    """Text with insert/delete editing and unlimited undo/redo."""

    def __init__(self, text: str = "") -> None:
        self.text = text
        self._undo: list[str] = []
        self._redo: list[str] = []

    def insert(self, pos: int, s: str) -> None:
        self._undo.append(self.text)
        self.text = self.text[:pos] + s + self.text[pos:]

    def delete(self, pos: int, n: int) -> None:
        self._undo.append(self.text)
        self.text = self.text[:pos] + self.text[pos + n :]

    @property
    def can_undo(self) -> bool:
        return bool(self._undo)

    @property
    def can_redo(self) -> bool:
        return bool(self._redo)

    def undo(self) -> bool:
        if not self._undo:
            return False
        self._redo.append(self.text)
        self.text = self._undo.pop()
        return True

    def redo(self) -> bool:
        if not self._redo:
            return False
        self._undo.append(self.text)
        self.text = self._redo.pop()
        return True
