"""A CPU server speaking SGLang's native API (``/generate``, ``/abort_request``, ``/health``,
``/model_info``, ``/v1/loads``, ``/workers``) in front of a pluggable :class:`Policy`; plus
``POST /policy/sessions/{sid}`` for per-session policy data (the replay policy's gold patch).

It aborts as SGLang does, reports a weight version, and checks that ``image_data`` pairs up with
the prompt's vision-token runs (400 otherwise). Details: docs/modules/policy.md.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from typing import Any

from aiohttp import web

from coding_agent_rl.policy.base import GenerateRequest, Policy, PolicyEnv
from coding_agent_rl.settings import default

log = logging.getLogger(__name__)

ROUTING_HEADER = "X-SMG-Routing-Key"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status}}, status=status)


class PolicyServer:
    def __init__(
        self,
        policy: Policy,
        tokenizer: Any = default("tokenizer"),
        tool_parser: str = default("tool_parser"),
        *,
        vision: Any = None,
    ):
        if isinstance(tokenizer, str):
            from coding_agent_rl.tokenizer import load_tokenizer

            self.tokenizer_path = tokenizer
            tokenizer = load_tokenizer(tokenizer)
        else:
            self.tokenizer_path = getattr(tokenizer, "name_or_path", "")
        self.policy = policy
        self.env = PolicyEnv(tokenizer=tokenizer, tool_parser=tool_parser)
        self.weight_version = "0"  # reported in meta_info, as SGLang reports its weights' version
        self.in_flight: dict[str, GenerateRequest] = {}
        self.aborted_rids: list[str] = []  # every rid /abort_request named ("*": abort_all)
        self.weight_version = "0"  # reported per reply as meta_info.weight_version
        self.vision = vision or getattr(policy, "vision", None)  # a VisionProcessor, or None
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=256)
        self.app = self._build_app()
        self._runner: web.AppRunner | None = None

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/generate", self._generate)
        app.router.add_post("/abort_request", self._abort)
        app.router.add_get("/health", self._health)
        app.router.add_get("/health_generate", self._health)
        app.router.add_get("/model_info", self._model_info)
        app.router.add_get("/get_model_info", self._model_info)
        app.router.add_get("/v1/loads", self._loads)
        app.router.add_get("/workers", self._workers)
        app.router.add_post("/policy/sessions/{sid}", self._register)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        return f"http://{host}:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def register(self, sid: str, **data: Any) -> None:
        self.policy.register(sid, **data)

    async def _generate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "malformed JSON")
        if body.get("stream"):
            return _error(400, "streaming is not supported by the CPU policy server")
        input_ids = body.get("input_ids")
        if input_ids is None and isinstance(body.get("text"), str):
            input_ids = self.env.encode(body["text"])
        if not isinstance(input_ids, list) or not all(isinstance(t, int) for t in input_ids):
            return _error(400, "input_ids must be one flat list of token ids")
        sampling = {k: v for k, v in (body.get("sampling_params") or {}).items() if v is not None}
        rid = str(body.get("rid") or uuid.uuid4().hex)
        req = GenerateRequest(rid, request.headers.get(ROUTING_HEADER, ""), input_ids, sampling)
        image_data = body.get("image_data") or []
        self.requests.append({"rid": rid, "input_ids": len(input_ids), "image_data": image_data})
        if image_data:
            problem = self._images(req, image_data)
            if problem:
                return _error(400, problem)
        self.in_flight[rid] = req
        started = time.monotonic()
        try:
            done = await self.policy.generate(req, self.env)
        except Exception as e:
            log.exception("policy %s failed", self.policy.name)
            return _error(500, f"policy {self.policy.name} failed: {e}")
        finally:
            self.in_flight.pop(rid, None)
        decode = self.env.tokenizer.decode
        meta = {
            "id": rid,
            "finish_reason": done.finish,
            "prompt_tokens": len(input_ids),
            "completion_tokens": len(done.output_ids),
            "cached_tokens": 0,
            "e2e_latency": time.monotonic() - started,
            "weight_version": self.weight_version,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [
                [lp, tid, None] for lp, tid in zip(done.logprobs, done.output_ids, strict=True)
            ]
        return web.json_response(
            {
                "text": decode(done.output_ids, skip_special_tokens=True),
                "output_ids": done.output_ids,
                "meta_info": meta,
            }
        )

    def _images(self, req: GenerateRequest, image_data: Any) -> str | None:
        """Pair ``image_data`` with the image-token runs of the ids; the problem, or None."""
        from coding_agent_rl.multimodal.buffer import merge_chunks
        from coding_agent_rl.multimodal.pictures import ImageError, ImageLimits, load_image

        if self.vision is None:
            return "image_data given but this policy server has no image processor"
        if not isinstance(image_data, list) or not all(isinstance(x, str) for x in image_data):
            return "image_data must be a list of strings (data URLs or base64)"
        try:
            refs = [
                load_image(x, ImageLimits(), f"image_data[{i}]") for i, x in enumerate(image_data)
            ]
            runs = self.vision.runs(req.input_ids)
        except (ImageError, ValueError) as e:
            return str(e)
        items = self.vision.process(refs)
        if len(runs) != len(items):
            return f"{len(runs)} image-token runs in input_ids for {len(items)} image_data entries"
        for n, (run, item) in enumerate(zip(runs, items, strict=True)):
            if run != item.tokens:
                return (
                    f"image {n}: {run} image tokens in input_ids, the processor makes {item.tokens}"
                )
        req.image_data = list(image_data)
        req.image_inputs = merge_chunks([item.train for item in items])
        return None

    async def _abort(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            abort_all = body.get("abort_all") is True
            rid = str(body.get("rid") or "")
        except (ValueError, AttributeError):
            return _error(400, "malformed JSON")
        if not abort_all and not rid:
            return _error(400, "abort_request needs a rid or abort_all")
        self.aborted_rids.append("*" if abort_all else rid)
        for key, req in list(self.in_flight.items()):
            if abort_all or key.startswith(rid):  # SGLang matches by prefix
                req.aborted.set()
        return web.json_response({})

    async def _loads(self, request: web.Request) -> web.Response:
        n = len(self.in_flight)
        return web.json_response(
            {"loads": [{"dp_rank": 0, "num_running_reqs": n, "num_waiting_reqs": 0}]}
        )

    async def _workers(self, request: web.Request) -> web.Response:
        """The router's worker list (slime's abort asks it where to send ``/abort_request``):
        this server is its own one worker."""
        return web.json_response({"workers": [{"url": f"http://{request.host}"}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": f"{self.policy.name}",
                "tokenizer_path": self.tokenizer_path,
                "is_generation": True,
                "policy": self.policy.name,
            }
        )

    async def _register(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise ValueError("body must be a JSON object")
            self.register(request.match_info["sid"], **data)
        except (ValueError, TypeError) as e:
            return _error(400, str(e))
        return web.json_response({"registered": request.match_info["sid"]})
