"""Translation between heron's records and vLLM's /v1/completions, and the launch command:
what heron asks for is what its engine contract needs, and an answer that breaks the contract
fails loudly instead of becoming a wrong sample."""

import pytest

from heron.records import GenerationRequest, SamplingParams
from heron.rollout.server.errors import EngineServerError
from heron.rollout.vllm.launch_args import LAUNCHER, VLLMLaunch
from heron.rollout.vllm.protocol import completion_payload, parse_completion

REQUEST = GenerationRequest([5, 6, 7], SamplingParams(max_new_tokens=4, temperature=0.7, top_p=0.9, stop_token_ids=(0, 3), seed=11))


def _answer(token_ids, logprobs, reason="length"):
    return {"choices": [{"token_ids": token_ids, "logprobs": {"token_logprobs": logprobs}, "finish_reason": reason}]}


def test_payload_carries_every_sampling_parameter_and_heron_stopping():
    body = completion_payload(REQUEST)
    assert body["prompt"] == [5, 6, 7] and body["max_tokens"] == 4 and body["seed"] == 11
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.7, 0.9, 0, 0.0)
    assert body["stop_token_ids"] == [0, 3] and body["ignore_eos"] is True  # only heron's stop tokens stop
    assert body["logprobs"] == 0 and body["return_token_ids"] is True


def test_greedy_requests_are_temperature_zero_without_top_p():
    body = completion_payload(GenerationRequest([1], SamplingParams(greedy=True, temperature=0.5, top_p=0.5)))
    assert (body["temperature"], body["top_p"]) == (0.0, 1.0)


def test_answer_becomes_a_generation_with_the_confirmed_version():
    gen = parse_completion(_answer([9, 8, 3], [-0.5, -1.25, -2.0], "stop"), REQUEST, policy_version=4)
    assert (gen.tokens, gen.logprobs, gen.finish_reason, gen.policy_version) == ([9, 8, 3], [-0.5, -1.25, -2.0], "stop", 4)


@pytest.mark.parametrize(
    "body, message",
    [
        ({"choices": []}, "vLLM answer lacks"),
        (_answer(None, [-1.0]), "vLLM answer lacks"),
        (_answer([1, 2], [-1.0]), "returned 2 tokens but 1 logprobs"),
        (_answer([1], [float("nan")]), "invalid logprobs"),
        (_answer([1], [0.5]), "invalid logprobs"),
        (_answer([1], [-1.0], "abort"), "finished a request with 'abort'"),
        (_answer([7], [-1.0], "stop"), "stopped on token 7, which is not a stop token"),
    ],
)
def test_answers_that_break_the_contract_raise(body, message):
    with pytest.raises(EngineServerError, match=message):
        parse_completion(body, REQUEST, policy_version=0)


def test_launch_command_sets_the_flags_the_contract_depends_on():
    launch = VLLMLaunch(python="/v/bin/python", model="/m", dtype="float32", max_model_len=256, max_num_seqs=8, seed=3,
                        kv_cache_bytes=1 << 28, extra_args=("--max-num-batched-tokens", "512"))
    command = launch.command(port=4321)
    assert command[:2] == ["/v/bin/python", str(LAUNCHER)]
    flags = dict(zip(command[2::2], command[3::2]))
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "4321"
    assert flags["--logprobs-mode"] == "processed_logprobs"
    assert flags["--worker-extension-cls"] == "heron_vllm_worker.HeronWorkerExtension"
    assert flags["--generation-config"] == "vllm" and flags["--kv-cache-memory-bytes"] == str(1 << 28)
    assert "--enforce-eager" in command and "--enable-sleep-mode" not in command
    assert command[-2:] == ["--max-num-batched-tokens", "512"]
    assert "--enable-sleep-mode" in VLLMLaunch("/p", "/m", "bfloat16", 8, 1, 0, device="cuda", enable_sleep_mode=True).command(1)


def test_launch_env_keeps_heron_venv_out_and_sets_cpu_binding():
    launch = VLLMLaunch("/p", "/m", "float32", 8, 1, 0, cpu_bind="0-1", grace_s=7.0)
    env = launch.env({"PYTHONPATH": "/heron/site", "VIRTUAL_ENV": "/heron/.venv", "PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "4"})
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env and env["PATH"] == "/bin"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1" and "VLLM_CPU_KVCACHE_SPACE" not in env
    assert env["HERON_VLLM_GRACE_S"] == "7.0" and env["HF_HUB_OFFLINE"] == "1"
