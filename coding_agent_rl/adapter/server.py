"""The adapter: one aiohttp app serving Anthropic Messages, OpenAI Chat, OpenAI Responses and
Gemini ``generateContent``.

The route picks the wire format; :mod:`handler` runs the request. Every route needs a live
session, resolved from ``Authorization: Bearer`` -> ``x-api-key`` -> ``x-goog-api-key`` before
the body is read (401
otherwise), opened by the rollout code through :attr:`AdapterServer.sessions`. The body limit
follows the context length (:func:`~coding_agent_rl.adapter.handler.body_limit`). The server runs
on the caller's event loop (:meth:`start`) or on its own thread (:meth:`start_in_thread`, for
slime); :meth:`serve_socket` adds a listener (e.g. one inside an isolated sandbox) tied to one
session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import pathlib
import threading
from typing import Any

from aiohttp import web

from coding_agent_rl.adapter.anthropic import AnthropicMessages
from coding_agent_rl.adapter.errors import AdapterError, BadRequest
from coding_agent_rl.adapter.gemini import Gemini, model_entry
from coding_agent_rl.adapter.handler import (
    TurnHandler,
    authenticate,
    body_limit,
    error_response,
    image_allowance,
    read_json,
)
from coding_agent_rl.adapter.listeners import DEFAULT_MAX_CONNECTIONS, CappedSockSite
from coding_agent_rl.adapter.openai_chat import OpenAIChat
from coding_agent_rl.adapter.openai_responses import OpenAIResponses
from coding_agent_rl.adapter.pictures import ImagePath
from coding_agent_rl.adapter.sessions import SessionConfig, SessionStore
from coding_agent_rl.adapter.turns import TurnEngine
from coding_agent_rl.adapter.wire import WireFormat, parse_request
from coding_agent_rl.model.render import Renderer
from coding_agent_rl.model.sglang import SGLangClient
from coding_agent_rl.multimodal.parts import ImageSettings
from coding_agent_rl.sandbox.netns import netns_cookie
from coding_agent_rl.settings import default

LINGER_S = 2.0
GEMINI_VERSIONS = ("v1beta", "v1alpha", "v1")  # API versions the Gemini SDKs may put in the path


@dataclasses.dataclass
class AdapterConfig:
    sglang_url: str
    tokenizer: Any = default("tokenizer")  # a spec for load_tokenizer, or a tokenizer object
    renderer: Renderer | None = None  # overrides `tokenizer`
    # The chat template's extra arguments when no `renderer` is given; None: XML tool calls for
    # the qwen3_coder parser, nothing otherwise.
    template_kwargs: dict[str, Any] | None = None
    tool_parser: str | None = default("tool_parser")
    reasoning_parser: str | None = default("reasoning_parser")
    max_context: int | None = None
    sampling_defaults: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {"max_new_tokens": 4096}
    )
    auto_open: bool = False
    session_defaults: SessionConfig = dataclasses.field(default_factory=SessionConfig)
    client_max_size: int | None = None  # request body limit; None: from max_context
    listener_max_connections: int = DEFAULT_MAX_CONNECTIONS  # per listener of serve_socket()
    model_name: str = "policy"
    heartbeat_s: float = 15.0
    poll_s: float = 0.1  # how often a waiting request checks that its client is still there
    sglang_timeout_s: float = 3600.0
    sglang_connect_retries: int = 4  # bounded exponential backoff from 0.5 s
    images: ImageSettings = dataclasses.field(default_factory=ImageSettings)
    """Image limits and the text-only placeholder policy (``multimodal/parts.py``)."""
    vision: Any = None
    """The VLM's image processor (a ``VisionProcessor`` or a checkpoint path); None: text-only."""


class AdapterServer:
    def __init__(self, config: AdapterConfig, *, sessions: SessionStore | None = None):
        self.config = config
        self.sessions = sessions or SessionStore(
            auto_open=config.auto_open, defaults=config.session_defaults
        )
        renderer = config.renderer
        if renderer is None:
            tokenizer = config.tokenizer
            if isinstance(tokenizer, str):
                from coding_agent_rl.tokenizer import load_tokenizer

                tokenizer = load_tokenizer(tokenizer)
            # Our Qwen3-style template writes XML calls when asked; other templates ignore it.
            kwargs = config.template_kwargs
            if kwargs is None:
                xml = config.tool_parser == "qwen3_coder"
                kwargs = {"tool_call_format": "xml"} if xml else {}
            renderer = Renderer(tokenizer, template_kwargs=kwargs)
        self.renderer = renderer
        self.sglang = SGLangClient(
            config.sglang_url,
            timeout_s=config.sglang_timeout_s,
            connect_retries=config.sglang_connect_retries,
        )
        self.engine = TurnEngine(
            renderer,
            self.sglang,
            tool_parser=config.tool_parser,
            reasoning_parser=config.reasoning_parser,
            max_context=config.max_context,
            sampling_defaults=config.sampling_defaults,
            images=ImagePath(config.images, self._vision(config.vision, renderer.tokenizer)),
        )
        limits = config.images.limits
        self.max_body = config.client_max_size or body_limit(
            config.max_context, image_allowance(limits.max_bytes, limits.max_per_sample)
        )
        self._bound: dict[int, str] = {}  # netns cookie -> the session its listener serves
        self.handler = TurnHandler(
            self.sessions,
            self.engine,
            max_body=self.max_body,
            bound=self._bound,
            heartbeat_s=config.heartbeat_s,
            poll_s=config.poll_s,
        )
        self.app = self._build_app()
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop serving requests

    @staticmethod
    def _vision(vision: Any, tokenizer: Any) -> Any:
        if vision is None or not isinstance(vision, (str, pathlib.Path)):
            return vision
        from coding_agent_rl.multimodal.processor import VisionProcessor

        return VisionProcessor.load(vision, tokenizer)

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body)
        r = app.router
        r.add_get("/", self._ok)  # also answers HEAD (Claude Code's reachability probe)
        r.add_get("/health", self._ok)
        r.add_get("/v1/models", self._models)
        turn = self.handler.handle
        r.add_post("/v1/messages", functools.partial(turn, wire_cls=AnthropicMessages))
        r.add_post("/v1/messages/count_tokens", self._count_tokens)
        r.add_post("/v1/chat/completions", functools.partial(turn, wire_cls=OpenAIChat))
        r.add_post("/v1/responses", functools.partial(turn, wire_cls=OpenAIResponses))
        for version in GEMINI_VERSIONS:
            r.add_post(f"/{version}/models/{{model}}:{{method}}", self._gemini)
            if version != "v1":  # /v1/models is the OpenAI / Anthropic listing
                r.add_get(f"/{version}/models", self._gemini_models)
                r.add_get(f"/{version}/models/{{model}}", self._gemini_models)
        app.on_cleanup.append(lambda _app: self.sglang.close())
        return app

    # -- lifecycle --

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on ``host:port`` (0: any free port); returns the base URL (no ``/v1``)."""
        self._loop = asyncio.get_running_loop()
        # A refused request's unread body is drained for at most LINGER_S (aiohttp's default is
        # 10 s): long enough for an honest client to read the 4xx, not to stream 50 MiB for 10 s.
        self._runner = web.AppRunner(self.app, access_log=None, lingering_time=LINGER_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        return f"http://{shown}:{bound}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Run the server on its own event loop in a daemon thread (for slime's process)."""
        ready: dict[str, Any] = {}
        started = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            try:
                ready["url"] = loop.run_until_complete(self.start(host, port))
            except BaseException as e:  # surfaced to the caller below
                ready["error"] = e
                loop.close()
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="coding-agent-rl-adapter", daemon=True)
        self._thread.start()
        started.wait()
        if "error" in ready:
            raise ready["error"]
        return ready["url"]

    def stop_thread(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            self._thread = self._loop = None

    # -- listeners inside sandboxes --

    async def _on_loop(self, coro: Any) -> Any:
        """Run ``coro`` on the serving loop, from whichever loop calls."""
        loop = self._loop
        if loop is None:
            coro.close()
            raise RuntimeError("the adapter is not started")
        if loop is asyncio.get_running_loop():
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    async def serve_socket(self, sock: Any, session: str | None = None) -> Any:
        """Serve the adapter on the listening socket ``sock`` as well; returns an async callable
        that stops it. ``session``: the only session this listener accepts, when the kernel can
        tell which network namespace a connection came from (Linux >= 5.14)."""

        async def add() -> web.SockSite:
            assert self._runner is not None
            cap = self.config.listener_max_connections
            site = CappedSockSite(self._runner, sock, max_connections=cap)
            await site.start()
            return site

        cookie = netns_cookie(sock)
        if session is not None and cookie is not None:
            self._bound[cookie] = session
        try:
            site = await self._on_loop(add())
        except BaseException:
            self._bound.pop(cookie or -1, None)
            sock.close()
            raise

        async def stop() -> None:
            self._bound.pop(cookie or -1, None)
            try:
                await self._on_loop(site.stop())
            except RuntimeError:  # the adapter stopped first: its cleanup closed the site
                pass
            sock.close()

        return stop

    # -- small routes --

    def _refusal(self, request: web.Request, wire: WireFormat | None = None) -> web.Response | None:
        """401 / 503 (in ``wire``'s format, default Anthropic's) unless the request carries a
        live session's key."""
        try:
            authenticate(request, self.sessions, self._bound, admit=False)
        except AdapterError as err:
            return error_response(wire or AnthropicMessages(), err, close=True)
        return None

    async def _ok(self, request: web.Request) -> web.Response:
        return self._refusal(request) or web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        if refused := self._refusal(request):
            return refused
        name = self.config.model_name
        model = {
            "id": name,
            "object": "model",
            "type": "model",
            "display_name": name,
            "created": 0,
            "created_at": "1970-01-01T00:00:00Z",
            "owned_by": "coding-agent-rl",
        }
        return web.json_response(
            {
                "object": "list",
                "data": [model],
                "has_more": False,
                "first_id": name,
                "last_id": name,
            }
        )

    async def _count_tokens(self, request: web.Request) -> web.Response:
        wire = AnthropicMessages()
        if refused := self._refusal(request):
            return refused
        try:
            body = await read_json(request, self.max_body)
            req = wire.parse({"max_tokens": 1, **body})
        except AdapterError as err:
            return error_response(wire, err)
        count = await asyncio.to_thread(self.renderer.count, req.messages, req.tools or None)
        return web.json_response({"input_tokens": count})

    # -- Gemini --

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        model, method = request.match_info["model"], request.match_info["method"]
        if method in ("generateContent", "streamGenerateContent"):
            stream = method == "streamGenerateContent"
            if stream and request.query.get("alt") != "sse":
                wire = Gemini(model)
                if refused := self._refusal(request, wire):
                    return refused
                bad = BadRequest("streamGenerateContent: only alt=sse is supported")
                return error_response(wire, bad, close=True)
            return await self.handler.handle(
                request, functools.partial(Gemini, model=model, stream=stream)
            )
        wire = Gemini(model)
        if refused := self._refusal(request, wire):
            return refused
        if method != "countTokens":
            err = AdapterError(f"models/{model}:{method} is not a supported method", status=404)
            return error_response(wire, err, close=True)
        try:
            body = await read_json(request, self.max_body)
            req = parse_request(wire, body)
        except AdapterError as err:
            return error_response(wire, err)
        count = await asyncio.to_thread(self.renderer.count, req.messages, req.tools or None)
        return web.json_response({"totalTokens": count})

    async def _gemini_models(self, request: web.Request) -> web.Response:
        if refused := self._refusal(request, Gemini()):
            return refused
        name = self.config.model_name
        entry = model_entry(name, self.config.max_context)
        if "model" in request.match_info:  # one model: whichever name the CLI asks for
            return web.json_response({**entry, "name": f"models/{request.match_info['model']}"})
        return web.json_response({"models": [entry]})
