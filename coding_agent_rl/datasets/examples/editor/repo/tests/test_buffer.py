from editor import Buffer


def test_insert_and_delete():
    b = Buffer("hello")
    b.insert(5, " world")
    b.delete(0, 1)
    assert b.text == "ello world"


def test_undo_restores_previous_text():
    b = Buffer("abc")
    b.insert(3, "d")
    assert b.undo() and b.text == "abc"
    assert not b.undo()


def test_redo_after_undo():
    b = Buffer("abc")
    b.delete(0, 1)
    b.undo()
    assert b.redo() and b.text == "bc"
    assert not b.can_redo
