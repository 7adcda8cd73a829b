"""What each agent CLI offers and what we map it to: one :class:`Capabilities` per harness,
printed by ``coding-agent-rl agents table`` (docs/agents.md holds that output)."""

from __future__ import annotations

import dataclasses

COLUMNS = ("wire format", "subagents", "compaction", "images", "resume", "approval", "quirks")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    wire: str  # the adapter route it speaks
    subagents: str  # what the CLI has -> which segment its chains become
    compaction: str
    images: str
    resume: str
    approval: str  # how permission prompts are switched off
    quirks: str = ""

    def cells(self) -> tuple[str, ...]:
        return (
            self.wire,
            self.subagents,
            self.compaction,
            self.images,
            self.resume,
            self.approval,
            self.quirks,
        )


def markdown(rows: dict[str, Capabilities]) -> str:
    """A Markdown table, one row per harness name."""
    lines = [
        "| agent | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    for name, caps in rows.items():
        cells = (f"`{name}`", *(c.replace("|", "\\|") for c in caps.cells()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
