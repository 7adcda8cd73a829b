"""Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` (``POST /v1beta/models/
{model}:{method}``), as Gemini CLI speaks it through the ``@google/genai`` SDK.

The model comes from the path, not the body. ``functionCall`` / ``functionResponse`` parts are
tool calls and results (a result's ``response`` object becomes the tool message's text: its
``output`` string when that is all it holds, else its JSON); ``thought`` parts are reasoning;
``inlineData`` images go down the multimodal path as base64 image parts. Errors use Google's
shape ``{"error": {"code", "message", "status"}}``. Gemini CLI ignores ``x-should-retry``; it
classifies a 429/503 by its message instead, so a refusal the CLI must not retry says
``limit: 0`` and a rate limit says ``Please retry in Ns``.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from coding_agent_rl.adapter import canonical as C
from coding_agent_rl.adapter import fields, pictures
from coding_agent_rl.adapter.errors import AdapterError, BadRequest, RateLimited
from coding_agent_rl.adapter.wire import Reply, WireFormat, WireRequest, new_id, sse

log = logging.getLogger(__name__)

STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
}
EMPTY_CHUNK = {"candidates": [{"content": {"role": "model", "parts": []}, "index": 0}]}


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):  # the SDKs accept a bare string for a text-only content
        return [{"text": content}]
    if not isinstance(content, dict):
        raise BadRequest(f"{where}: expected a Content object, got {_show(content)}")
    parts = content.get("parts")
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise BadRequest(f"{where}.parts: expected a list, got {_show(parts)}")
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise BadRequest(f"{where}.parts[{i}]: expected an object, got {_show(part)}")
        if "text" in part and not isinstance(part["text"], str):
            raise BadRequest(f"{where}.parts[{i}].text: expected a string")
    return parts


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    """``inlineData`` as the base64 image part the multimodal path decodes."""
    data = part.get("inlineData") or part.get("inline_data")
    if not isinstance(data, dict) or not isinstance(data.get("data"), str):
        raise BadRequest(f"{where}.inlineData: expected {{mimeType, data}} with base64 data")
    mime = data.get("mimeType") or data.get("mime_type") or ""
    if not isinstance(mime, str):
        raise BadRequest(f"{where}.inlineData.mimeType: expected a string")
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data["data"]}}


def _other(part: dict[str, Any]) -> str:
    """Text for a part the policy reads but did not write (code execution, file references)."""
    if isinstance(part.get("executableCode"), dict):
        return str(part["executableCode"].get("code") or "")
    if isinstance(part.get("codeExecutionResult"), dict):
        return str(part["codeExecutionResult"].get("output") or "")
    if isinstance(part.get("fileData"), dict):
        return f"[file omitted: {part['fileData'].get('fileUri', '')}]"
    return ""


def _result_text(response: Any) -> str:
    """A ``functionResponse.response`` as the tool message's text."""
    if response is None:
        return ""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "result") and isinstance(value, str):
            return value
        if key == "error" and isinstance(value, str):
            return "Error: " + value
    return json.dumps(response, ensure_ascii=False)


class Gemini(WireFormat):
    """One request to ``model`` (from the path); ``stream``: ``streamGenerateContent``."""

    name = "gemini"

    def __init__(self, model: str = "", stream: bool = False) -> None:
        self.model = model
        self.stream = stream
        self.response_id = new_id("", 22)

    # -- request --

    def parse(self, body: dict[str, Any]) -> WireRequest:
        inner = body.get("generateContentRequest")  # countTokens may wrap the request
        if isinstance(inner, dict):
            body = inner
        sampling = self._sampling(body)
        for key in ("toolConfig", "safetySettings", "cachedContent", "labels"):
            if body.get(key) is not None and not isinstance(body[key], (dict, list, str)):
                raise BadRequest(f"{key}: unexpected value {_show(body[key])}")
        raw = body.get("contents")
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            raise BadRequest("contents: a non-empty list is required")
        messages: list[dict[str, Any]] = []
        system = body.get("systemInstruction", body.get("system_instruction"))
        if system is not None:
            text = C.join_text(
                [str(p.get("text") or "") for p in _parts(system, "systemInstruction")]
            )
            if text:
                messages.append({"role": "system", "content": text})
        for i, content in enumerate(raw):
            where = f"contents[{i}]"
            role = content.get("role") if isinstance(content, dict) else None
            if role not in (None, "user", "model", "function"):
                raise BadRequest(f"{where}.role: expected user or model, got {_show(role)}")
            parts = _parts(content, where)
            if role == "model":
                messages.append(self._model(parts, where))
            else:
                self._user(messages, parts, where)
        return WireRequest(
            messages=messages,
            tools=self._tools(body.get("tools")),
            sampling=sampling,
            stream=self.stream,
            model=self.model,
        )

    @staticmethod
    def _model(parts: list[dict[str, Any]], where: str) -> dict[str, Any]:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        for i, part in enumerate(parts):
            call = part.get("functionCall")
            if call is not None:
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise BadRequest(f"{where}.parts[{i}].functionCall: expected {{name, args}}")
                args = call.get("args")
                if args is not None and not isinstance(args, dict):
                    raise BadRequest(f"{where}.parts[{i}].functionCall.args: expected an object")
                calls.append(C.tool_call(call["name"], args or {}))
            elif isinstance(part.get("text"), str):
                (thoughts if part.get("thought") else texts).append(part["text"])
            else:
                log.debug("ignoring a model part with keys %s", sorted(part))
        return C.assistant(C.join_text(texts), C.join_text(thoughts), calls)

    @staticmethod
    def _user(messages: list[dict[str, Any]], parts: list[dict[str, Any]], where: str) -> None:
        items: list[Any] = []

        def flush() -> None:
            if items:
                messages.append({"role": "user", "content": pictures.content(items)})
                items.clear()

        for i, part in enumerate(parts):
            at = f"{where}.parts[{i}]"
            result = part.get("functionResponse")
            if result is not None:
                if not isinstance(result, dict):
                    raise BadRequest(f"{at}.functionResponse: expected an object")
                name = result.get("name")
                if name is not None and not isinstance(name, str):
                    raise BadRequest(f"{at}.functionResponse.name: expected a string")
                response = result.get("response")
                if response is not None and not isinstance(response, dict):
                    raise BadRequest(f"{at}.functionResponse.response: expected an object")
                flush()
                shown: list[Any] = [_result_text(response)]
                for j, extra in enumerate(_parts(result, f"{at}.functionResponse")):
                    if "inlineData" in extra or "inline_data" in extra:
                        shown.append(_image(extra, f"{at}.functionResponse.parts[{j}]"))
                tool_msg: dict[str, Any] = {"role": "tool", "content": pictures.content(shown)}
                if name:
                    tool_msg["name"] = name
                messages.append(tool_msg)
            elif "inlineData" in part or "inline_data" in part:
                items.append(_image(part, at))
            elif isinstance(part.get("text"), str):
                if not part.get("thought"):
                    items.append(part["text"])
            elif text := _other(part):
                items.append(text)
        flush()

    @staticmethod
    def _tools(tools: Any) -> list[dict[str, Any]]:
        if tools is None:
            return []
        if not isinstance(tools, list):
            raise BadRequest(f"tools: expected a list, got {_show(tools)}")
        out = []
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise BadRequest(f"tools[{i}]: expected an object, got {_show(tool)}")
            decls = tool.get("functionDeclarations", tool.get("function_declarations"))
            if decls is None:  # googleSearch, codeExecution, ...: the policy cannot run them
                log.debug("dropping a non-function tool with keys %s", sorted(tool))
                continue
            if not isinstance(decls, list):
                raise BadRequest(f"tools[{i}].functionDeclarations: expected a list")
            for decl in decls:
                if not isinstance(decl, dict):
                    raise BadRequest(f"tools[{i}].functionDeclarations: expected objects")
                schema = decl.get("parametersJsonSchema", decl.get("parameters"))
                fn = C.function_tool(decl.get("name"), decl.get("description"), schema)
                if fn:
                    out.append(fn)
        return out

    @staticmethod
    def _sampling(body: dict[str, Any]) -> dict[str, Any]:
        config = fields.opt_object(body, "generationConfig") or {}
        try:
            count = fields.opt_int(config, "candidateCount", minimum=1)
            if count not in (None, 1):
                raise BadRequest("candidateCount: only one candidate per request is supported")
            fields.opt_object(config, "thinkingConfig")
            renamed = {"topP": "top_p", "topK": "top_k"}
            plain = {renamed.get(k, k): v for k, v in config.items()}
            k = plain.get("top_k")
            if isinstance(k, float) and k.is_integer():  # JSON numbers: 64.0 is 64
                plain["top_k"] = int(k)
            return fields.sampling(plain, max_tokens=("maxOutputTokens",), stop="stopSequences")
        except BadRequest as e:
            message = e.message.replace("top_p:", "topP:").replace("top_k:", "topK:")
            raise BadRequest(f"generationConfig.{message}") from e

    # -- reply --

    @staticmethod
    def _finish(reply: Reply) -> str:
        if reply.finish_reason == "length":
            return "MAX_TOKENS"
        return "OTHER" if reply.truncated else "STOP"

    @staticmethod
    def _reply_parts(reply: Reply) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        if reply.reasoning:
            parts.append({"text": reply.reasoning, "thought": True})
        if reply.text:
            parts.append({"text": reply.text})
        for call in reply.tool_calls:
            args = call.get("arguments")
            parts.append(
                {
                    "functionCall": {
                        "name": call.get("name"),
                        "args": args if isinstance(args, dict) else {"input": args},
                    }
                }
            )
        return parts

    @staticmethod
    def _usage(reply: Reply) -> dict[str, int]:
        return {
            "promptTokenCount": reply.prompt_tokens,
            "candidatesTokenCount": reply.completion_tokens,
            "totalTokenCount": reply.prompt_tokens + reply.completion_tokens,
            "cachedContentTokenCount": reply.cached_tokens,
        }

    def _response(self, reply: Reply, parts: list[dict[str, Any]], *, last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        out: dict[str, Any] = {"candidates": [candidate]}
        if last:
            candidate["finishReason"] = self._finish(reply)
            out["usageMetadata"] = self._usage(reply)
        out["modelVersion"] = reply.model
        out["responseId"] = self.response_id
        return out

    def json_body(self, reply: Reply) -> dict[str, Any]:
        return self._response(reply, self._reply_parts(reply), last=True)

    def stream_open(self, model: str, prompt_tokens: int) -> bytes:
        return self.heartbeat()

    def stream_reply(self, reply: Reply) -> bytes:
        parts = self._reply_parts(reply) or [{"text": ""}]
        chunks = [self._response(reply, [p], last=False) for p in parts[:-1]]
        chunks.append(self._response(reply, parts[-1:], last=True))
        return b"".join(sse(c) for c in chunks)

    def heartbeat(self) -> bytes:
        # The SDK's SSE reader takes only ``data:`` lines (a ": comment" would stall it); a
        # model content without parts is valid to Gemini CLI and adds nothing.
        return sse(EMPTY_CHUNK)

    def error_body(self, err: AdapterError) -> dict[str, Any]:
        message = err.message
        if isinstance(err, RateLimited):
            message += f" Please retry in {max(1, round(err.retry_after))}s."
        elif err.status in (429, 503):
            message += " (limit: 0; not retryable)"
        code = err.status
        return {"error": {"code": code, "message": message, "status": STATUS.get(code, "UNKNOWN")}}

    def stream_error(self, err: AdapterError) -> bytes:
        # The SDK raises an ApiError for a chunk that is a bare JSON error object.
        return json.dumps(self.error_body(err)).encode()


def model_entry(name: str, context: int | None) -> dict[str, Any]:
    """The models-listing entry of the policy (``GET /v1beta/models``)."""
    return {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": "1",
        "displayName": name,
        "description": "the policy served by coding-agent-rl",
        "inputTokenLimit": context or 131072,
        "outputTokenLimit": context or 131072,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
        "thinking": True,
    }
