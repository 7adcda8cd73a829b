"""Adapter sessions: one per rollout, opened and read by the rollout code, filled by requests.

The rollout code may live on another thread than the adapter's event loop (slime), so every
method is guarded by one lock; the objects handed out (``Turn`` lists) are copies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from typing import Any

from coding_agent_rl.adapter.errors import SessionClosed, TurnLimit, Unauthorized
from coding_agent_rl.trajectory.turn import Turn


@dataclasses.dataclass
class SessionConfig:
    """Per-session settings.

    ``sampling_defaults`` apply where the request says nothing; ``sampling_fixed`` override the
    request (for ``max_new_tokens`` it is a cap). ``max_turns`` counts requests admitted
    (recorded + in flight); ``max_context`` bounds prompt + output tokens (None: server default).
    """

    sampling_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    sampling_fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_turns: int | None = None
    max_context: int | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RecordedTurn:
    """A turn plus the canonical keys used to recognise an extension of it."""

    turn: Turn
    prefix_keys: tuple[bytes, ...]  # keys of turn.messages + [turn.assistant]
    tools_key: bytes


class Session:
    def __init__(self, sid: str, config: SessionConfig):
        self.sid = sid
        self.config = config
        self.closed = False
        self.in_flight = 0
        self.recorded: list[RecordedTurn] = []
        self.errors: list[str] = []  # server-side failures (5xx) answered to the client


class SessionStore:
    """Thread-safe registry of sessions. ``auto_open`` admits unknown ids with ``defaults``."""

    def __init__(self, *, auto_open: bool = False, defaults: SessionConfig | None = None):
        self.auto_open = auto_open
        self.defaults = defaults or SessionConfig()
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(
        self,
        sid: str,
        *,
        sampling_defaults: dict[str, Any] | None = None,
        sampling_fixed: dict[str, Any] | None = None,
        max_turns: int | None = None,
        max_context: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Open (or re-open, keeping nothing) the session ``sid``."""
        config = SessionConfig(
            sampling_defaults=dict(sampling_defaults or {}),
            sampling_fixed=dict(sampling_fixed or {}),
            max_turns=max_turns,
            max_context=max_context,
            metadata=dict(metadata or {}),
        )
        with self._lock:
            self._sessions[sid] = Session(sid, config)

    def close(self, sid: str) -> None:
        """Refuse further requests (503); recorded turns stay readable until :meth:`pop`."""
        with self._lock:
            if sid in self._sessions:
                self._sessions[sid].closed = True

    def in_flight(self, sid: str) -> int:
        """Requests admitted and not yet answered (or dropped)."""
        with self._lock:
            session = self._sessions.get(sid)
            return session.in_flight if session else 0

    async def settled(self, sid: str, timeout: float = 10.0) -> bool:
        """Wait until no request of ``sid`` is in flight (True) or ``timeout`` passes (False).

        A turn is recorded just *after* its reply is written, so a client may hold the reply a
        moment before the turn appears; call this before reading the turns of a finished agent.
        Works from any event loop or thread (it polls).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.in_flight(sid):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    def turns(self, sid: str) -> list[Turn]:
        with self._lock:
            session = self._sessions.get(sid)
            return [r.turn for r in session.recorded] if session else []

    def errors(self, sid: str) -> list[str]:
        """Server-side failures (upstream policy errors, adapter bugs) this session answered."""
        with self._lock:
            session = self._sessions.get(sid)
            return list(session.errors) if session else []

    def note_error(self, session: Session, message: str) -> None:
        with self._lock:
            session.errors.append(message)

    def pop(self, sid: str) -> list[Turn]:
        """Forget the session and return its turns."""
        with self._lock:
            session = self._sessions.pop(sid, None)
            return [r.turn for r in session.recorded] if session else []

    def __contains__(self, sid: str) -> bool:
        with self._lock:
            return sid in self._sessions

    # -- used by the request handlers (event-loop side) --

    def admit(self, sid: str | None) -> Session:
        """Count a new request against ``sid``; raises the HTTP error the CLI should see."""
        if not sid:
            raise Unauthorized(
                "no session id: send it as the API key (Authorization: Bearer <sid>)"
            )
        with self._lock:
            session = self._sessions.get(sid)
            if session is None and self.auto_open:
                session = self._sessions[sid] = Session(sid, dataclasses.replace(self.defaults))
            if session is None:
                raise Unauthorized(
                    f"unknown adapter session {sid!r}: the rollout must open it first"
                )
            if session.closed:
                raise SessionClosed(f"adapter session {sid!r} is closed")
            limit = session.config.max_turns
            if limit is not None and len(session.recorded) + session.in_flight >= limit:
                raise TurnLimit(f"adapter session {sid!r} reached its turn limit ({limit})")
            session.in_flight += 1
            return session

    def release(self, session: Session, recorded: RecordedTurn | None) -> Turn | None:
        """End a request admitted by :meth:`admit`; record its turn (index assigned here)."""
        with self._lock:
            session.in_flight -= 1
            if recorded is None:
                return None
            recorded.turn.index = len(session.recorded)
            session.recorded.append(recorded)
            return recorded.turn

    def snapshot(self, session: Session) -> list[RecordedTurn]:
        with self._lock:
            return list(session.recorded)
