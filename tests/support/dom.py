"""A small element tree on top of ``html.parser`` for checking the report's structure."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from html.parser import HTMLParser

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None = None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Node]:
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        def ok(n: Node) -> bool:
            return (
                (tag is None or n.tag == tag)
                and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
            )

        return [n for n in self.iter() if ok(n)]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag or '*'} class={cls} {attrs}>"
        return found[0]

    def by_id(self, ident: str) -> Node:
        return self.find(id=ident)

    def select(self, pred: Callable[[Node], bool]) -> list[Node]:
        return [n for n in self.iter() if pred(n)]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.cur = self.root
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent  # type: ignore[assignment]
        if n is self.root:
            self.errors.append(f"stray </{tag}>")
            return
        if n is not self.cur:
            self.errors.append(f"</{tag}> closes unclosed <{self.cur.tag}>")
        self.cur = n.parent  # type: ignore[assignment]

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse(html: str) -> tuple[Node, list[str]]:
    """The document root and the nesting errors found (an empty list for well-formed HTML)."""
    b = _Builder()
    b.feed(html)
    b.close()
    if b.cur is not b.root:
        b.errors.append(f"<{b.cur.tag}> never closed")
    return b.root, b.errors
