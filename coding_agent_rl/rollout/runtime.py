"""Everything a process needs once to run rollouts: tokenizer, policy, adapter, harness."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from coding_agent_rl import settings
from coding_agent_rl.multimodal.parts import ImageSettings
from coding_agent_rl.rollout.cli_act import CliAct
from coding_agent_rl.rollout.config import RolloutConfig
from coding_agent_rl.rollout.orphans import OrphanReaper
from coding_agent_rl.rollout.runner import RolloutRunner
from coding_agent_rl.settings import Settings, default

log = logging.getLogger(__name__)


@dataclasses.dataclass
class RuntimeConfig:
    agent: str = default("agent")
    sglang_url: str | None = None  # a real SGLang server / router
    policy: str | None = None  # or a CPU policy: replay | scripted:FILE | hf:DIR
    tokenizer: str = default("tokenizer")
    tool_parser: str = default("tool_parser")
    reasoning_parser: str | None = default("reasoning_parser")
    sampling_defaults: dict[str, Any] = dataclasses.field(default_factory=dict)
    adapter_port: int = 0  # 0: ephemeral
    harness_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    in_thread: bool = False  # serve the adapter from its own thread (slime's event loop is busy)
    vision: str | None = None  # a VLM checkpoint (image processor); default: an hf: VLM policy's
    images: ImageSettings = dataclasses.field(default_factory=ImageSettings)  # limits, text-only
    # The process's settings, installed while the runtime runs (slime's generate reads them
    # once); None: whatever the entry point installed.
    settings: Settings | None = None
    # The node this runtime's rollouts run on (each record's ``node``); a multi-node executor
    # sets it per worker. None: the host name of the machine the runtime starts on (resolved
    # there, so a config built on a driver and shipped to a worker names the worker's host).
    node: str | None = None
    # Adapter processes (``adapter/pool.py``); None: ``settings.adapter_processes`` (default 1:
    # the adapter serves from this process).
    adapter_processes: int | None = None
    # Chat-template arguments of the native agent's encoder (slime's apply_chat_template_kwargs).
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if bool(self.sglang_url) == bool(self.policy):
            raise ValueError(
                "give exactly one of sglang_url (a served policy) or policy (a CPU policy)"
            )


class Runtime:
    """Start with ``await rt.start()``; then ``rt.runner.run(row, sample)`` per rollout."""

    def __init__(self, config: RuntimeConfig):
        self.config = config
        self.policy_server: Any = None
        self.adapter: Any = None
        self.runner: RolloutRunner | None = None
        self.tokenizer: Any = None
        self.engine: Any = None  # the native agent's SGLang client
        self.vision: Any = None  # the VLM's VisionProcessor (None: a text-only policy)
        self._installed = False
        self._previous_settings: Settings | None = None
        self.reaper: OrphanReaper | None = None

    async def start(self) -> Runtime:
        try:
            return await self._start()
        except BaseException:
            if self.reaper is not None:  # its periodic task does not outlive a failed start
                await self.reaper.stop()
                self.reaper = None
            raise

    async def _start(self) -> Runtime:
        from coding_agent_rl.adapter.server import AdapterConfig, AdapterServer
        from coding_agent_rl.harness import get_harness
        from coding_agent_rl.model.render import Renderer
        from coding_agent_rl.rollout.isolation import AgentNetwork, agent_network_mode
        from coding_agent_rl.tokenizer import load_tokenizer

        cfg = self.config
        if cfg.settings is not None and not self._installed:
            self._previous_settings = settings.install(cfg.settings)
            self._installed = True
        # Sandboxes of dead runs on this engine go first, then every reap_interval_s.
        self.reaper = OrphanReaper(cfg.rollout.backend)
        await self.reaper.start()
        network = AgentNetwork(agent_network_mode(cfg.rollout.agent_network), cfg.rollout.backend)
        if network.mode == "none":
            log.warning(
                "agent network 'none': the agent CLI cannot reach the adapter, so rollouts of "
                "CLIs that call a model fail (as infrastructure); use adapter-only for those"
            )
        self.tokenizer = load_tokenizer(cfg.tokenizer)
        sglang_url = cfg.sglang_url
        on_open = None
        self.vision = self._load_vision()
        if cfg.policy:
            from coding_agent_rl.policy import load_policy
            from coding_agent_rl.policy.server import PolicyServer

            policy = load_policy(cfg.policy)
            self.policy_server = PolicyServer(
                policy, self.tokenizer, cfg.tool_parser, vision=self.vision
            )
            sglang_url = await self.policy_server.start("127.0.0.1", 0)
            if policy.name == "replay":
                server = self.policy_server

                async def on_open(sid: str, row: Any) -> None:
                    server.register(sid, patch=row.patch or "", workdir=row.workdir)

        assert sglang_url is not None  # RuntimeConfig checks that one of the two is given
        if cfg.agent == "native":  # the policy acts through tool calls: no adapter, no CLI
            self.runner = self._native_runner(sglang_url, on_open)
            return self
        sampling = {"max_new_tokens": 4096, **cfg.sampling_defaults}
        adapter_config = AdapterConfig(
            sglang_url=sglang_url,
            renderer=Renderer(self.tokenizer),
            tool_parser=cfg.tool_parser,
            reasoning_parser=cfg.reasoning_parser,
            max_context=cfg.rollout.max_context,
            sampling_defaults=sampling,
            model_name=cfg.rollout.model_name,
            images=cfg.images,
            vision=self.vision,
        )
        bind = network.bind_host()
        processes = cfg.adapter_processes or settings.current().adapter_processes
        if processes > 1:
            return await self._start_pool(processes, adapter_config, network, on_open)
        self.adapter = AdapterServer(adapter_config)
        port = cfg.adapter_port or settings.current().adapter_port or 0
        if cfg.in_thread:
            local_url = self.adapter.start_in_thread(bind, port)
        else:
            local_url = await self.adapter.start(bind, port)
        public_url = network.public_url(int(local_url.rsplit(":", 1)[1]))
        log.info(
            "adapter listening on %s; agent network %s: sandboxes reach it at %s%s",
            local_url,
            network.mode,
            public_url,
            " (a socket inside each sandbox)" if network.inside else "",
        )
        act = CliAct(
            adapter=self.adapter,
            adapter_url=public_url,
            harness=get_harness(cfg.agent, **cfg.harness_options),
            config=cfg.rollout,
            decode=lambda ids: self.tokenizer.decode(ids),
            on_session_open=on_open,
            network=network,
        )
        self.runner = RolloutRunner(act=act, config=cfg.rollout, node=cfg.node)
        return self

    async def _start_pool(
        self, processes: int, adapter_config: Any, network: Any, on_open: Any
    ) -> Runtime:
        """``processes`` adapter processes; each session's sandbox reaches its own process."""
        from coding_agent_rl.adapter.pool import AdapterPool
        from coding_agent_rl.harness import get_harness

        cfg = self.config
        # The children load the tokenizer and the image processor themselves, and render with
        # the template arguments of the in-process adapter's Renderer (none).
        pool_config = dataclasses.replace(
            adapter_config,
            renderer=None,
            tokenizer=cfg.tokenizer,
            template_kwargs={},
            vision=self._vision_path(),
        )
        if cfg.adapter_port or settings.current().adapter_port:
            log.warning("adapter_port is ignored with %d adapter processes", processes)
        self.adapter = pool = AdapterPool(processes, pool_config)
        urls = await pool.start(network.bind_host())
        log.info(
            "%d adapter processes on %s; agent network %s", processes, ", ".join(urls), network.mode
        )
        act = CliAct(
            adapter=pool,
            adapter_url=network.public_url(pool.ports()[0]),
            harness=get_harness(cfg.agent, **cfg.harness_options),
            config=cfg.rollout,
            decode=lambda ids: self.tokenizer.decode(ids),
            on_session_open=on_open,
            network=network,
            url_for=lambda sid: network.public_url(pool.port_for(sid)),
        )
        self.runner = RolloutRunner(act=act, config=cfg.rollout, node=cfg.node)
        return self

    def _vision_path(self) -> str | None:
        """``vision``, else the hf: policy's directory when it is a VLM, else None."""
        from coding_agent_rl.policy.tiny_vlm import is_vision_checkpoint

        path = self.config.vision
        policy = self.config.policy or ""
        if path is None and policy.startswith("hf:") and is_vision_checkpoint(policy[3:]):
            path = policy[3:]
        return path

    def _load_vision(self) -> Any:
        """The image processor of :meth:`_vision_path`, or None (a text-only policy)."""
        from coding_agent_rl.multimodal.processor import VisionProcessor

        path = self._vision_path()
        return None if path is None else VisionProcessor.load(path, self.tokenizer)

    def _native_runner(self, sglang_url: str | None, on_open: Any) -> RolloutRunner:
        from coding_agent_rl.env.encoding import ChatEncoder
        from coding_agent_rl.model.sglang import SGLangClient
        from coding_agent_rl.rollout.native import NativeAct, NativeOptions

        cfg = self.config
        assert sglang_url is not None
        self.engine = SGLangClient(sglang_url)
        encoder = ChatEncoder(
            self.tokenizer,
            template_kwargs=cfg.template_kwargs or None,
            vision=self.vision,
            images=cfg.images,
        )
        act = NativeAct(
            engine=self.engine,
            encoder=encoder,
            config=cfg.rollout,
            options=NativeOptions(**cfg.harness_options),
            tool_parser=cfg.tool_parser,
            reasoning_parser=cfg.reasoning_parser,
            on_session_open=on_open,
        )
        return RolloutRunner(act=act, config=cfg.rollout, node=cfg.node)

    async def stop(self) -> None:
        """Stop what :meth:`start` started (a second call does nothing)."""
        if self.runner is not None:
            await self.runner.close()  # prepared sandboxes not claimed, snapshots
        if self.reaper is not None:
            await self.reaper.stop()
            self.reaper = None
        engine, self.engine = self.engine, None
        if engine is not None:
            await engine.close()
        adapter, self.adapter = self.adapter, None
        if adapter is not None:
            from coding_agent_rl.adapter.pool import AdapterPool

            if isinstance(adapter, AdapterPool):
                await adapter.stop()
            elif self.config.in_thread:
                adapter.stop_thread()
            else:
                await adapter.stop()
        server, self.policy_server = self.policy_server, None
        if server is not None:
            await server.stop()
        if self._installed:
            settings.install(self._previous_settings)
            self._installed = False
