"""A stand-in for SGLang's HTTP API (no GPU here): records what the adapter sends, answers
``/generate`` with fixed tokens, or holds the request until ``/abort_request`` names its rid."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web


class SGLangStandIn:
    def __init__(
        self,
        output_ids: list[int],
        *,
        hold: bool = False,
        delay_s: float = 0.0,
        finish: dict[str, Any] | None = None,
        status: int = 200,
        weight_version: str | None = None,
        health: int = 200,
    ):
        self.output_ids = output_ids
        self.hold = hold
        self.delay_s = delay_s
        self.finish = finish or {"type": "stop", "matched": output_ids[-1] if output_ids else 0}
        self.status = status
        self.weight_version = weight_version  # meta_info.weight_version, when set
        self.health = health  # what GET /health answers
        self.generate_calls: list[dict[str, Any]] = []  # {"body", "headers"}
        self.aborted: list[str] = []
        self.started = asyncio.Event()
        self._abort_events: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=self.health, text="ok" if self.health == 200 else "down")

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.generate_calls.append({"body": body, "headers": dict(request.headers)})
        self.started.set()
        if self.status != 200:
            return web.json_response({"error": {"message": "stand-in refused"}}, status=self.status)
        finish = self.finish
        if self.hold:
            event = self._abort_events.setdefault(body["rid"], asyncio.Event())
            try:
                await asyncio.wait_for(event.wait(), 30)
                finish = {"type": "abort", "message": "Abort in waiting queue"}
            except asyncio.TimeoutError:
                pass
        elif self.delay_s:
            await asyncio.sleep(self.delay_s)
        ids = [] if finish["type"] == "abort" else self.output_ids
        meta = {
            "id": body["rid"],
            "finish_reason": finish,
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
            "cached_tokens": 3,
            "output_token_logprobs": [[-0.25, t, None] for t in ids],
            "new_unknown_key": 1,
        }
        if self.weight_version is not None:
            meta["weight_version"] = self.weight_version
        return web.json_response({"text": "", "output_ids": ids, "meta_info": meta})

    async def _abort(self, request: web.Request) -> web.Response:
        rid = (await request.json())["rid"]
        self.aborted.append(rid)
        self._abort_events.setdefault(rid, asyncio.Event()).set()
        return web.json_response({})
