"""One agent request over HTTP: admit the session, render, generate, reply, then record.

The session is authenticated from the headers before a byte of the body is read; a body larger
than the limit (from its ``Content-Length``, or while it streams in) is refused with 413 without
being parsed, and a refused request's connection is closed rather than drained. Large bodies
are parsed off the event loop, so one session's megabytes do not stall the others' streams.

The reply is written before the turn is recorded. While SGLang works, the request watches its
client: a hang-up cancels the generation (the SGLang client then sends ``/abort_request``) and
nothing is recorded (logged as 499); streams get heartbeats so client idle timeouts never fire.
Every error reaches the client in its own wire format (an error event once a stream started).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from coding_agent_rl.adapter.errors import (
    AdapterError,
    BadRequest,
    ClientGone,
    RateLimited,
    TooLarge,
    error_note,
)
from coding_agent_rl.adapter.sessions import Session, SessionStore
from coding_agent_rl.adapter.turns import TurnEngine
from coding_agent_rl.adapter.wire import WireFormat, parse_request
from coding_agent_rl.sandbox.netns import netns_cookie

log = logging.getLogger(__name__)

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
# Refusals the agent CLI must not retry (the rollout is over or misconfigured). Anthropic's and
# OpenAI's SDKs honour this header; without it Claude Code retries a 429 for minutes. 502: the
# SGLang client already retried the policy server with backoff; the CLI retrying 10 more times
# (~150 s) only delays the rollout's own infra retry.
NO_RETRY_STATUSES = (401, 404, 413, 429, 502, 503)
PARSE_OFF_LOOP_BYTES = 256 * 1024  # bodies above this are parsed on a worker thread
# Bytes a request body may take per token of context: JSON escaping (``\u00e9`` is 6 bytes for
# one character), tool schemas, cache markers. A body the context cannot hold is refused unread.
BODY_BYTES_PER_TOKEN = 64
MIN_BODY_BYTES = 4 << 20
DEFAULT_CONTEXT = 131072  # for the body limit when no context length is configured


def body_limit(max_context: int | None, image_bytes: int = 0) -> int:
    """The request body limit for a policy context of ``max_context`` tokens, plus
    ``image_bytes``: what the images a sample may hold take on the wire (CLIs re-send every image
    of the conversation with each request; see :func:`image_allowance`)."""
    text = max(MIN_BODY_BYTES, BODY_BYTES_PER_TOKEN * (max_context or DEFAULT_CONTEXT))
    return text + image_bytes


def image_allowance(max_bytes: int, max_per_sample: int) -> int:
    """Base64 bytes of ``max_per_sample`` images of ``max_bytes`` each (4 characters per 3
    bytes): the body room a session's images may take. Lower the image limits to lower it."""
    return max_per_sample * (-(-max_bytes // 3) * 4)


def header_session_id(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    key = request.headers.get("x-api-key", "").strip()
    key = key or request.headers.get("x-goog-api-key", "").strip()  # Gemini's SDK
    return key or None


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _write(resp: web.StreamResponse, data: bytes, *, eof: bool = False) -> None:
    try:
        await resp.write(data)
        if eof:
            await resp.write_eof()
    except ConnectionError as e:
        raise ClientGone() from e


async def read_json(request: web.Request, max_size: int) -> dict[str, Any]:
    """The body as a JSON object; 413 before reading when ``Content-Length`` says too much."""
    if request.content_length is not None and request.content_length > max_size:
        raise TooLarge(f"request body of {request.content_length} bytes exceeds {max_size}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        raise TooLarge(f"request body exceeds {max_size} bytes") from e
    if len(raw) > max_size:
        raise TooLarge(f"request body exceeds {max_size} bytes")
    try:
        body = (
            await asyncio.to_thread(json.loads, raw)
            if len(raw) > PARSE_OFF_LOOP_BYTES
            else json.loads(raw)
        )
    except ValueError as e:
        raise BadRequest(f"malformed JSON body: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def error_response(wire: WireFormat, err: AdapterError, *, close: bool = False) -> web.Response:
    """``err`` in the client's format. ``close``: the body was not read; closing the connection
    beats draining it (a 50 MiB body need not cross the loop)."""
    headers = {"x-should-retry": "false"} if err.status in NO_RETRY_STATUSES else {}
    if isinstance(err, RateLimited):
        headers = {"x-should-retry": "true", "retry-after": str(max(1, round(err.retry_after)))}
    if err.status >= 500:
        log.warning("%s %s: %s", wire.name, err.status, err.message)
    resp = web.json_response(wire.error_body(err), status=err.status, headers=headers)
    if close:
        resp.force_close()
    return resp


def authenticate(
    request: web.Request, sessions: SessionStore, bound: dict[int, str], *, admit: bool
) -> Session:
    """The request's session from its headers (never its body); ``admit`` counts a turn.

    ``bound``: netns cookie -> the one session a listener inside a sandbox may serve.
    """
    only = None
    if bound:
        cookie = netns_cookie(
            request.transport.get_extra_info("socket") if request.transport else None
        )
        only = bound.get(cookie) if cookie is not None else None
    key = header_session_id(request)
    if admit:
        return sessions.admit(key, bound=only)
    return sessions.authenticate(key, bound=only)


class TurnHandler:
    def __init__(
        self,
        sessions: SessionStore,
        engine: TurnEngine,
        *,
        max_body: int,
        heartbeat_s: float,
        poll_s: float,
        bound: dict[int, str] | None = None,
    ):
        self.sessions = sessions
        self.engine = engine
        self.max_body = max_body
        self.heartbeat_s = heartbeat_s
        self.poll_s = poll_s
        self.bound = bound if bound is not None else {}

    async def handle(
        self, request: web.Request, wire_cls: Callable[[], WireFormat]
    ) -> web.StreamResponse:
        wire = wire_cls()
        session = None
        resp: web.StreamResponse | None = None
        try:
            try:
                session, body = await self.admit_and_read(request)
            except AdapterError as err:
                return error_response(wire, err, close=True)
            req = parse_request(wire, body)
            prepared = await self.engine.prepare(session, self.sessions.snapshot(session), req)
            if req.stream:
                resp = web.StreamResponse(headers=SSE_HEADERS)
                try:
                    await resp.prepare(request)
                except ConnectionError as e:
                    raise ClientGone() from e
                await _write(resp, wire.stream_open(req.model, len(prepared.prompt_ids)))
            generation = self.engine.generate(prepared, session.sid)
            gen = await self._wait(request, resp, wire, generation)
            reply, recorded = self.engine.finish(session, prepared, gen, wire.name)
            if resp is not None:
                await _write(resp, wire.stream_reply(reply), eof=True)
            else:
                resp = await self._send_json(request, wire.json_body(reply))
            self.sessions.release(session, recorded)  # reply first, then record
            session = None
            return resp
        except ClientGone:
            sid = session.sid if session else "?"
            log.info("499 client gone before the reply was written (session %s): turn dropped", sid)
            return resp if resp is not None else web.Response(status=499)
        except Exception as e:
            failure: AdapterError = (
                e if isinstance(e, AdapterError) else AdapterError(f"adapter error: {e!r}")
            )
            if not isinstance(e, AdapterError):
                log.exception("adapter failure")
            if session is not None and failure.status >= 500:
                # "infra: ..." only when a health probe confirmed the policy server failed
                self.sessions.note_error(session, error_note(failure))
            if resp is None or not resp.prepared:
                return error_response(wire, failure)
            try:  # the stream already started: an error event, so the CLI does not hang
                await _write(resp, wire.stream_error(failure), eof=True)
            except ClientGone:
                pass
            return resp
        finally:
            if session is not None:
                self.sessions.release(session, None)

    async def admit_and_read(self, request: web.Request) -> tuple[Session, dict[str, Any]]:
        """Admit the request's session, then read its body: nothing of the body is read for a
        request that is refused."""
        session = authenticate(request, self.sessions, self.bound, admit=True)
        try:
            return session, await read_json(request, self.max_body)
        except BaseException:
            self.sessions.release(session, None)
            raise

    async def _wait(
        self, request: web.Request, resp: web.StreamResponse | None, wire: WireFormat, coro: Any
    ) -> Any:
        """Await ``coro``; cancel it (-> SGLang abort) if the client hangs up."""
        task = asyncio.ensure_future(coro)
        last_beat = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.poll_s)
                if done:
                    return task.result()
                if _client_gone(request):
                    raise ClientGone()
                if resp is not None and time.monotonic() - last_beat >= self.heartbeat_s:
                    await _write(resp, wire.heartbeat())
                    last_beat = time.monotonic()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def _send_json(self, request: web.Request, payload: dict[str, Any]) -> web.Response:
        if _client_gone(request):
            raise ClientGone()
        data = json.dumps(payload, ensure_ascii=False).encode()
        resp = web.Response(body=data, content_type="application/json")
        try:
            await resp.prepare(request)
            await resp.write_eof()
        except ConnectionError as e:
            raise ClientGone() from e
        return resp
