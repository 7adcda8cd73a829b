"""A process as slime runs one: its event loop in a daemon thread (slime's ``async_utils.run``),
one sample through ``coding_agent_rl.generate_native.generate`` with the calc environment, then
exit without stopping anything. ``python slime_exit_script.py CONFIG.yaml``."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "support")]

from coding_agent_rl import generate_native  # noqa: E402
from coding_agent_rl.policy.scripted import ScriptedPolicy  # noqa: E402
from coding_agent_rl.policy.server import PolicyServer  # noqa: E402
from coding_agent_rl.tokenizer import qwen3_tokenizer_dir  # noqa: E402
from support.calc_env import TOOLS  # noqa: E402
from support.slime_vendor import slime, slime_args  # noqa: E402

SOLVE = {
    "steps": [
        {"tool": {"name": "add", "arguments": {"a": 2, "b": 3}}},
        {"tool": {"name": "answer", "arguments": {"value": 5}}},
    ]
}


def main(config: str) -> None:
    s = slime()
    from slime.utils.async_utils import run

    server = PolicyServer(ScriptedPolicy(SOLVE), "qwen3", "qwen25")
    url = run(server.start())
    Path(config).write_text(
        f"max_turns: 6\nrollout_interaction_env_path: {TESTS / 'support' / 'calc_env.py'}\n"
    )
    args = slime_args(
        hf_checkpoint=str(qwen3_tokenizer_dir()),
        sglang_router_ip="127.0.0.1",
        sglang_router_port=int(url.rsplit(":", 1)[1]),
        rollout_max_context_len=4096,
        rollout_max_response_len=2048,
        sglang_tool_call_parser="qwen25",
        sglang_reasoning_parser="qwen3",
        custom_config_path=config,
        apply_chat_template_kwargs=None,
    )
    sample = s.Sample(
        index=0,
        group_index=0,
        prompt=[{"role": "user", "content": "What is 2 + 3?"}],
        label=5,
        metadata={"tools": TOOLS, "calc": {}},
    )
    out = run(generate_native.generate(args, sample, {"temperature": 1.0, "max_new_tokens": 256}))
    print("STATUS", out.status.name, len(out.metadata["turns"]))
    run(server.stop())


if __name__ == "__main__":
    main(sys.argv[1])
