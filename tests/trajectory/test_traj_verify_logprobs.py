"""verify-logprobs against a tiny random Qwen3 model: real transformers + torch on CPU.

The test samples tokens with the model itself (log_softmax of the logits, no KV cache), builds
multi-turn samples whose responses interleave sampled and inserted (masked) tokens, writes them
as JSONL and runs the real command.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from coding_agent_rl.cli import main  # noqa: E402
from coding_agent_rl.policy.verify import load_model, read_samples, verify  # noqa: E402
from coding_agent_rl.types import Sample, Status, aborted_sample  # noqa: E402

VOCAB = 151_936  # Qwen3's embedding size


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    model = transformers.Qwen3ForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("tiny-qwen3")
    model.save_pretrained(path)
    return path


def sample_turn(
    model, ids: list[int], n: int, gen: torch.Generator
) -> tuple[list[int], list[float]]:
    out, lps = [], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids + out]), use_cache=False).logits[0, -1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
            out.append(tok)
            lps.append(float(logp[tok]))
    return out, lps


def agent_sample(model, seed: int) -> Sample:
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, VOCAB, (12,), generator=gen).tolist()
    r1, l1 = sample_turn(model, prompt, 6, gen)
    tool = torch.randint(0, VOCAB, (5,), generator=gen).tolist()  # a tool result: not sampled
    r2, l2 = sample_turn(model, prompt + r1 + tool, 5, gen)
    return Sample(
        index=seed,
        rollout_id=seed,
        tokens=prompt + r1 + tool + r2,
        response_length=len(r1 + tool + r2),
        loss_mask=[1] * 6 + [0] * 5 + [1] * 5,
        rollout_log_probs=l1 + [0.0] * 5 + l2,
        status=Status.COMPLETED,
        metadata={"segment": "final"},
    )


@pytest.fixture(scope="module")
def samples(model_dir):
    model = load_model(model_dir)
    return [agent_sample(model, seed) for seed in range(3)]


def write(path, samples):
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in samples))
    return path


def test_rescored_logprobs_match_sampling(model_dir, samples, tmp_path, capsys):
    removed = aborted_sample(Sample(index=9), "sandbox died")
    path = write(tmp_path / "samples.jsonl", [*samples, removed])
    assert main(["verify-logprobs", str(path), "--model", str(model_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["skipped"] == 1
    assert report["trained"] == 3 * 11
    assert report["max_abs"] < 1e-4
    assert [c["trained"] for c in report["samples"]] == [11, 11, 11]


def test_a_corrupted_logprob_is_detected(model_dir, samples, tmp_path, capsys):
    bad = Sample.from_dict(samples[1].to_dict())
    bad.rollout_log_probs[-2] += 0.05  # one token of the second turn
    path = write(tmp_path / "samples.jsonl", [samples[0], bad, samples[2]])
    assert main(["verify-logprobs", str(path), "--model", str(model_dir)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    report = verify(read_samples(path), load_model(model_dir))
    worst = max(report.samples, key=lambda c: c.max_abs)
    assert worst.line == 2 and abs(worst.max_abs - 0.05) < 1e-3
    assert report.samples[0].max_abs < 1e-4
    # a looser tolerance accepts it
    assert (
        main(["verify-logprobs", str(path), "--model", str(model_dir), "--tolerance", "0.1"]) == 0
    )


def test_user_errors(model_dir, tmp_path, capsys):
    assert (
        main(["verify-logprobs", str(tmp_path / "missing.jsonl"), "--model", str(model_dir)]) == 2
    )
    path = write(tmp_path / "empty.jsonl", [aborted_sample(Sample(index=1), "x")])
    assert main(["verify-logprobs", str(path), "--model", str(model_dir)]) == 2
    assert "no trained token" in capsys.readouterr().err
