"""Adapter sessions: one per rollout, opened and read by the rollout code, filled by requests.

The rollout code may live on another thread than the adapter's event loop (slime), so every
method is guarded by one lock; the objects handed out (``Turn`` lists) are copies.

A session id is also its API key (the CLI sends it as ``Authorization: Bearer``): the rollout
runner makes ids with 128 random bits (:func:`new_session_id`). Lookups go through a SHA-256
digest of the key and end in a constant-time comparison, so response times tell nothing about
other sessions' keys. Each session caps its requests in flight and its request rate (429 with
``retry-after``; the CLI retries), so one agent cannot monopolise the adapter.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import secrets
import threading
import time
from typing import Any

from coding_agent_rl.adapter.errors import RateLimited, SessionClosed, TurnLimit, Unauthorized
from coding_agent_rl.adapter.replay import ReplayPlan, ReplayState
from coding_agent_rl.trajectory.turn import Turn

KEY_BITS = 128


def new_session_id(prefix: str = "") -> str:
    """``prefix`` + 128 random bits (32 hex digits): an id that is also an unguessable key."""
    return f"{prefix}{secrets.token_hex(KEY_BITS // 8)}"


def _b(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")


def _digest(key: str) -> bytes:
    return hashlib.sha256(_b(key)).digest()


@dataclasses.dataclass
class SessionConfig:
    """Per-session settings.

    ``sampling_defaults`` apply where the request says nothing; ``sampling_fixed`` override the
    request (for ``max_new_tokens`` it is a cap). ``max_turns`` counts requests admitted
    (recorded + in flight); ``max_context`` bounds prompt + output tokens (None: server default).
    ``max_in_flight`` caps concurrent requests; ``rate`` / ``burst`` a token bucket of requests
    per second (an agent CLI makes one request per model turn, a few per second at most, a few
    in parallel with subagents). None turns a cap off.
    """

    sampling_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    sampling_fixed: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_turns: int | None = None
    max_context: int | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_in_flight: int | None = 8
    rate: float | None = 20.0
    burst: int = 40


@dataclasses.dataclass
class RecordedTurn:
    """A turn plus the canonical keys used to recognise an extension of it."""

    turn: Turn
    prefix_keys: tuple[bytes, ...]  # keys of turn.messages + [turn.assistant]
    tools_key: bytes


class Session:
    def __init__(self, sid: str, config: SessionConfig, replay: ReplayPlan | None = None):
        self.sid = sid
        self.config = config
        # a branch's prefix replay (adapter/replay.py): its first requests get recorded replies
        self.replay = ReplayState(replay) if replay is not None else None
        self.closed = False
        self.in_flight = 0
        self.recorded: list[RecordedTurn] = []
        self.errors: list[str] = []  # server-side failures (5xx) answered to the client
        self.tokens = float(config.burst)  # the rate limit's bucket
        self.refilled = time.monotonic()

    def take_token(self) -> float:
        """0 when a request may start now (one token taken), else seconds until one is there."""
        rate = self.config.rate
        if not rate:
            return 0.0
        now = time.monotonic()
        self.tokens = min(float(self.config.burst), self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / rate


class SessionStore:
    """Thread-safe registry of sessions. ``auto_open`` admits unknown ids with ``defaults``."""

    def __init__(self, *, auto_open: bool = False, defaults: SessionConfig | None = None):
        self.auto_open = auto_open
        self.defaults = defaults or SessionConfig()
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[bytes, Session] = {}  # SHA-256 of the key -> session
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
        replay: ReplayPlan | None = None,
    ) -> None:
        """Open (or re-open, keeping nothing) the session ``sid`` (its API key too); request
        caps come from the store's ``defaults``. ``replay``: recorded turns its first requests
        are answered with (a branch of another rollout, adapter/replay.py)."""
        config = dataclasses.replace(
            self.defaults,
            sampling_defaults=dict(sampling_defaults or {}),
            sampling_fixed=dict(sampling_fixed or {}),
            max_turns=max_turns,
            max_context=max_context,
            metadata=dict(metadata or {}),
        )
        with self._lock:
            self._add(Session(sid, config, replay))

    def _add(self, session: Session) -> None:
        self._sessions[session.sid] = session
        self._by_key[_digest(session.sid)] = session

    def _lookup(self, key: str) -> Session | None:
        """The session whose key is ``key`` (call under the lock); constant-time comparison."""
        session = self._by_key.get(_digest(key))
        if session is None or not hmac.compare_digest(_b(session.sid), _b(key)):
            return None
        return session

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
            if session is not None:
                self._by_key.pop(_digest(sid), None)
            return [r.turn for r in session.recorded] if session else []

    def __contains__(self, sid: str) -> bool:
        with self._lock:
            return sid in self._sessions

    # -- used by the request handlers (event-loop side) --

    def authenticate(self, key: str | None, *, bound: str | None = None) -> Session:
        """The live session whose key is ``key``, or the HTTP error the client should see.

        ``bound``: the only session allowed on the connection's listener (one inside a sandbox
        serves that sandbox's session alone), None where any may come.
        """
        if not key:
            raise Unauthorized(
                "no session id: send it as the API key (Authorization: Bearer <sid>)"
            )
        with self._lock:
            session = self._lookup(key)
            if session is None and self.auto_open:
                session = Session(key, dataclasses.replace(self.defaults))
                self._add(session)
            if session is None:
                raise Unauthorized("unknown adapter session: the rollout must open it first")
            if bound is not None and not hmac.compare_digest(_b(bound), _b(key)):
                raise Unauthorized("this listener serves another adapter session")
            if session.closed:
                raise SessionClosed(f"adapter session {session.sid!r} is closed")
            return session

    def admit(self, key: str | None, *, bound: str | None = None) -> Session:
        """Count a new request against the session of ``key``; raises the HTTP error the CLI
        should see (401 unknown, 503 closed, 429 turn limit / too many in flight / too fast)."""
        session = self.authenticate(key, bound=bound)
        with self._lock:
            cfg = session.config
            limit = cfg.max_turns
            if limit is not None and len(session.recorded) + session.in_flight >= limit:
                raise TurnLimit(f"adapter session {session.sid!r} reached its turn limit ({limit})")
            if cfg.max_in_flight is not None and session.in_flight >= cfg.max_in_flight:
                raise RateLimited(
                    f"adapter session has {session.in_flight} requests in flight "
                    f"(at most {cfg.max_in_flight})",
                    retry_after=1.0,
                )
            wait = session.take_token()
            if wait:
                raise RateLimited(
                    f"adapter session exceeds {cfg.rate:g} requests/s", retry_after=wait
                )
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
            if session.replay is not None and recorded.turn.replay is not None:
                session.replay.recorded(recorded.turn.replay["of"])
            return recorded.turn

    def snapshot(self, session: Session) -> list[RecordedTurn]:
        with self._lock:
            return list(session.recorded)
