"""Client for SGLang's native ``POST /generate`` (token ids in, token ids + logprobs out).

One call per turn, never streamed; cancellations and timeouts abort the request on the engine.
Failures are classified by what they prove: 4xx is :class:`PolicyRejected`; other failures are
:class:`UpstreamError`, infrastructure only when a health probe fails too (docs/modules/model.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any

import aiohttp

from coding_agent_rl.model.errors import PolicyRejected, UpstreamError

log = logging.getLogger(__name__)

ROUTING_HEADER = "X-SMG-Routing-Key"
FINISH_REASONS = ("stop", "length", "abort")
HEALTH_TIMEOUT_S = 5.0


@dataclasses.dataclass
class Generation:
    output_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "abort"
    matched_stop: str | None = None  # the stop *string* that ended generation, if any
    cached_tokens: int = 0
    latency_s: float = 0.0
    rid: str = ""
    weight_version: str | None = None  # meta_info.weight_version, when the engine reports it
    abort_message: str | None = None  # finish_reason.message of an ``abort`` finish


def empty_length_generation() -> Generation:
    """What a turn gets when the context budget leaves no room to generate."""
    return Generation(output_ids=[], logprobs=[], finish_reason="length")


class SGLangClient:
    """``base_url`` is the SGLang server or router, e.g. ``http://10.0.0.1:30000``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 3600.0,
        connect_retries: int = 4,
        backoff_s: float = 0.5,
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.connect_retries = connect_retries
        self.backoff_s = backoff_s
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # No connection cap: concurrency is bounded by the rollout, not by this pool.
            self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def generate(
        self,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        routing_key: str,
        image_data: list[str] | None = None,
    ) -> Generation:
        """``image_data``: one entry (a data URL) per image-token run of ``input_ids``, in order:
        every image of the prompt, not only the new ones (SGLang pairs them by position)."""
        rid = uuid.uuid4().hex
        payload: dict[str, Any] = {
            "input_ids": input_ids,
            "sampling_params": sampling_params,
            "return_logprob": True,
            "logprob_start_len": -1,
            "rid": rid,
        }
        if image_data:
            payload["image_data"] = list(image_data)
        started = time.monotonic()
        try:
            data = await asyncio.wait_for(
                self._post_with_retries(payload, routing_key), timeout=self.timeout_s
            )
        except (asyncio.CancelledError, asyncio.TimeoutError) as e:
            # Shielded: the abort must go out even though this task is being cancelled.
            await asyncio.shield(self._abort_quietly(payload["rid"]))
            if isinstance(e, asyncio.TimeoutError):
                raise await self._probed(
                    UpstreamError(f"SGLang did not answer within {self.timeout_s:.0f}s", status=504)
                ) from e
            raise
        except UpstreamError as e:
            raise await self._probed(e) from e.__cause__
        gen = _parse_generation(data)
        gen.rid = payload["rid"]  # a retry after a reset asked under a fresh one
        gen.latency_s = time.monotonic() - started
        return gen

    async def _post_with_retries(self, payload: dict[str, Any], routing_key: str) -> dict:
        headers = {ROUTING_HEADER: routing_key}
        url = f"{self.base_url}/generate"
        for attempt in range(self.connect_retries + 1):
            try:
                async with self._session().post(url, json=payload, headers=headers) as resp:
                    if resp.status in (502, 503, 504) and attempt < self.connect_retries:
                        log.warning("SGLang answered %s; retrying", resp.status)
                    elif 400 <= resp.status < 500:
                        text = await resp.text()
                        raise PolicyRejected(
                            f"the policy server rejected the request ({resp.status}): {text[:300]}"
                        )
                    elif resp.status != 200:
                        text = await resp.text()
                        # A 503 still there after the backoff (weights being updated, no worker
                        # free) is the server's own state: no request can make it say so.
                        raise UpstreamError(
                            f"SGLang /generate failed ({resp.status}): {text[:500]}",
                            confirmed=resp.status == 503,
                        )
                    else:
                        return await resp.json(content_type=None)
            except aiohttp.ClientConnectorError as e:
                # Only failures to *connect* are retried: the request cannot have started.
                if attempt >= self.connect_retries:
                    raise UpstreamError(f"cannot reach SGLang at {self.base_url}: {e}") from e
                log.warning("cannot reach SGLang (%s); retrying", e)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
                # The connection was reset (a restart, a weight update): nothing came back, so
                # nothing was recorded. The old request is aborted and asked again, fresh.
                if attempt >= self.connect_retries:
                    raise UpstreamError(f"SGLang /generate broke off: {e}") from e
                log.warning("SGLang connection reset (%s); retrying", e)
                await self._abort_quietly(payload["rid"])
                payload["rid"] = uuid.uuid4().hex
            except aiohttp.ClientError as e:
                raise UpstreamError(f"SGLang /generate broke off: {e}") from e
            await asyncio.sleep(min(self.backoff_s * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    async def healthy(self) -> bool:
        """Whether the server answers ``GET /health`` with 200 within a few seconds."""
        try:
            timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
            async with self._session().get(f"{self.base_url}/health", timeout=timeout) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def _probed(self, err: UpstreamError) -> UpstreamError:
        """``err``, marked as infrastructure evidence when the server's health check fails."""
        if await self.healthy():
            err.message += " (the policy server's health check passes)"
            err.args = (err.message,)
        else:
            err.infra_evidence = True
            err.message += " (the policy server's health check fails too)"
            err.args = (err.message,)
        return err

    async def abort(self, rid: str) -> None:
        url = f"{self.base_url}/abort_request"
        timeout = aiohttp.ClientTimeout(total=10)
        async with self._session().post(url, json={"rid": rid}, timeout=timeout) as resp:
            await resp.read()

    async def _abort_quietly(self, rid: str) -> None:
        try:
            await self.abort(rid)
        except Exception as e:  # best effort: the request may already be finished
            log.warning("abort_request %s failed: %s", rid, e)


def _parse_generation(data: dict[str, Any]) -> Generation:
    try:
        return _generation(data)
    except UpstreamError as e:
        e.infra_evidence = True  # the server's own reply is broken, whatever was asked
        raise
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise UpstreamError(f"malformed /generate reply: {e}", confirmed=True) from e


def _generation(data: dict[str, Any]) -> Generation:
    if not isinstance(data, dict) or "meta_info" not in data:
        raise UpstreamError(f"unexpected /generate reply: {str(data)[:300]}")
    meta = data["meta_info"]
    pairs = meta.get("output_token_logprobs") or []
    ids = [int(p[1]) for p in pairs]
    logprobs = [float(p[0]) if p[0] is not None else 0.0 for p in pairs]
    if not pairs and data.get("output_ids"):
        raise UpstreamError("SGLang returned output ids without logprobs (return_logprob ignored?)")
    if data.get("output_ids") is not None and list(data["output_ids"]) != ids:
        raise UpstreamError("SGLang output_ids disagree with output_token_logprobs")
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
    if kind not in FINISH_REASONS:
        kind = "abort"
    matched = finish.get("matched") if isinstance(finish, dict) else None
    message = finish.get("message") if isinstance(finish, dict) else None
    version = meta.get("weight_version")
    return Generation(
        output_ids=ids,
        logprobs=logprobs,
        finish_reason=kind,
        matched_stop=matched if isinstance(matched, str) else None,
        cached_tokens=int(meta.get("cached_tokens") or 0),
        weight_version=None if version is None else str(version),
        abort_message=(str(message) if message else "no message") if kind == "abort" else None,
    )
