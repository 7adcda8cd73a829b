"""mini-swe-agent (PyPI ``mini-swe-agent``): a Python package; speaks OpenAI Chat through litellm.

Its pinned wheel set runs isolated from the task's Python (see pyvenv.py). It has one tool,
``bash``, and ends when a command prints ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``, or after
three replies in a row without a tool call.
"""

from __future__ import annotations

import json

from coding_agent_rl.harness.base import BaseHarness
from coding_agent_rl.harness.capabilities import Capabilities
from coding_agent_rl.harness.context import HarnessContext
from coding_agent_rl.harness.pyvenv import PyPackage

# Every wheel it runs with: mini-swe-agent's dependencies less ``datasets`` (only its SWE-bench
# batch runner imports it; that drops numpy, pandas and pyarrow).
LOCK = """
aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0 boto3==1.44.8 botocore==1.44.8
certifi==2026.10.19.post1 charset-normalizer==3.5.3 click==8.5.1 fastuuid==0.14.0 filelock==4.3.1
frozenlist==1.8.0 fsspec==2026.9.0 h11==0.16.0 h2==4.4.1 hf-xet==1.8.0 hpack==4.2.0 httpcore==1.0.9 httpcore2==2.16.2
httpx==0.28.1 httpx2==2.16.2 huggingface-hub==2.4.0 hyperframe==6.1.0 idna==3.20 importlib-metadata==8.9.0
jinja2==3.1.6 jiter==0.19.0 jmespath==1.1.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
litellm==1.110.2 markdown-it-py==4.3.0 markupsafe==3.0.4 mdit-py-plugins==0.7.0 mdurl==0.1.2
mini-swe-agent==2.4.6 multidict==7.2.1 openai==3.57.0 packaging==26.4 platformdirs==4.14.9
prompt-toolkit==3.0.53 propcache==0.5.4 pydantic==2.14.4 pydantic-core==2.50.5
pydantic-settings==2.16.3 pygments==2.21.0 python-dateutil==2.9.0.post0 python-dotenv==1.2.4
pyyaml==6.0.4 referencing==0.37.0 regex==2026.11.19 requests==2.34.2 rich==15.0.0
rpds-py==2026.9.1 s3transfer==0.19.3 shellingham==1.5.4 six==1.17.0 sniffio==1.3.1 tenacity==9.2.1
textual==8.2.8 tiktoken==0.14.0 tokenizers==0.23.3 tqdm==4.70.1 truststore==0.10.5 typer==0.29.2
typing-extensions==4.16.0 typing-inspection==0.4.5 urllib3==2.8.0 wcwidth==0.9.4 yarl==1.25.1
zipp==4.1.2
"""

COMMAND_TIMEOUT_S = 3600  # per bash command (its default, 30 s, is shorter than a test run)


class MiniSweAgent(BaseHarness):
    name = "mini_swe_agent"
    python = PyPackage(
        name="mini-swe-agent",
        version="2.4.6",
        entry="minisweagent.run.mini:app",
        lock=tuple(LOCK.split()),
    )
    capabilities = Capabilities(
        wire="OpenAI Chat (litellm)",
        subagents="none",
        compaction="none (the whole history every turn)",
        images="not tested here (off by default: `multimodal_regex`)",
        resume="none",
        approval="`--yolo --exit-immediately` (no confirmation, no exit prompt)",
        quirks="one `bash` tool, a fresh shell per command; ends on `echo "
        "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` or 3 replies without a tool call; its model "
        "retries off (a refusal is final); needs `python3.11` in the image",
    )
    extra_args_env = "SLIME_AGENT_MINI_EXTRA_ARGS"
    extra_env_env = "SLIME_AGENT_MINI_EXTRA_ENVS"

    def config_dir(self, ctx: HarnessContext) -> str:
        return f"{ctx.agent_home}/.config/mini-swe-agent"

    def config_files(self, ctx: HarnessContext) -> dict[str, str]:
        config = {
            "agent": {"step_limit": 0, "cost_limit": 0},  # the run's budget bounds it
            "environment": {"timeout": COMMAND_TIMEOUT_S},
            "model": {
                "model_class": "litellm",
                "cost_tracking": "ignore_errors",  # no price for our model: cost 0, no error
                "set_cache_control": None,  # no Anthropic cache markers, whatever the name
                "model_kwargs": {"api_base": ctx.adapter_url + "/v1", "drop_params": True},
            },
        }
        # JSON is YAML: the file it reads with ``-c``; ``.env`` stops it asking for set-up.
        return {
            f"{self.config_dir(ctx)}/adapter.yaml": json.dumps(config, indent=1),
            f"{self.config_dir(ctx)}/.env": "MSWEA_CONFIGURED=true\n",
        }

    def env(self, ctx: HarnessContext) -> dict[str, str]:
        return {
            "OPENAI_API_KEY": ctx.session_id,  # sent as "Authorization: Bearer <sid>"
            "MSWEA_GLOBAL_CONFIG_DIR": self.config_dir(ctx),
            "MSWEA_CONFIGURED": "true",
            "MSWEA_COST_TRACKING": "ignore_errors",
            # A refusal (turn cap, abort) is final; the adapter already retries the engine.
            # Its default retries one for minutes (10 tries, backing off 4 s to 60 s).
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            # litellm: its bundled model price map, tokenizers and catalogs, never a fetch of
            # its own (the price map is fetched at import otherwise).
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "NO_COLOR": "1",
        }

    def argv(self, ctx: HarnessContext, prompt: str) -> list[str]:
        assert self.python is not None
        builtin = f"{self.python.target}/site-packages/minisweagent/config/mini.yaml"
        return [
            *self.python.argv(),
            "--model",
            f"openai/{ctx.model}",
            "--task",
            prompt,
            "--yolo",
            "--exit-immediately",
            "--config",
            builtin,
            "--config",
            f"{self.config_dir(ctx)}/adapter.yaml",
            "--output",
            f"{self.config_dir(ctx)}/trajectory.json",
        ]
