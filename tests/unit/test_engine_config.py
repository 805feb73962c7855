"""engine.* config: embedded stays the default, vLLM settings are validated in one line each, and
the vLLM launch settings follow from the run config."""

import pytest

from heron.build import engine_spec
from heron.preflight import preflight
from heron.config import ConfigError, load_config
from heron.rollout.vllm.build import vllm_launch, vllm_python

BASE = ["model.path=m", "data.path=d.jsonl"]


def test_embedded_is_the_default_engine():
    cfg = load_config(None, BASE)
    assert cfg.engine.kind == "embedded"
    assert cfg.engine.vllm.python == "" and cfg.engine.vllm.device == "cpu"


@pytest.mark.parametrize(
    "override, message",
    [
        ("engine.vllm.sleep_level=3", "engine.vllm.sleep_level must be 1 or 2, got 3"),
        ("engine.vllm.startup_timeout_s=0", "engine.vllm.startup_timeout_s must be > 0, got 0.0"),
        ("engine.vllm.kv_cache_gib=-1", "engine.vllm.kv_cache_gib must be >= 0"),
        ("engine.vllm.gpu_memory_utilization=1.5", "engine.vllm.gpu_memory_utilization must be in (0, 1], got 1.5"),
        ("engine.vllm.max_concurrent_requests=0", "engine.vllm.max_concurrent_requests must be >= 1, got 0"),
        ("engine.vllm.extra_args=['--port','9000']", "engine.vllm.extra_args must not set --port: heron sets it"),
        ("engine.vllm.extra_args=['--logprobs-mode=raw_logprobs']", "must not set --logprobs-mode"),
        ("engine.vllm.cpu_bind=''", "engine.vllm.cpu_bind must not be empty"),
    ],
)
def test_bad_vllm_settings_are_one_line_errors(override, message):
    with pytest.raises(ConfigError) as error:
        load_config(None, [*BASE, "engine.kind=vllm", override])
    assert message in str(error.value) and "\n" not in str(error.value)


def test_missing_vllm_venv_names_the_make_target(tmp_path):
    with pytest.raises(ConfigError, match=r"does not exist; run `make vllm-venv`"):
        vllm_python(str(tmp_path / "nope" / "python"))


def test_launch_settings_follow_the_run_config(toy_model_dir, tmp_path):
    python = tmp_path / "python"
    python.write_text("")
    cfg = load_config(None, [
        f"model.path={toy_model_dir}", "data.path=d.jsonl", "engine.kind=vllm", f"engine.vllm.python={python}",
        "rollout.max_batch_size=24", "run.seed=7", "engine.vllm.kv_cache_gib=0.25", "colocate=true",
    ])
    launch = vllm_launch(engine_spec(cfg, pad_token_id=0))
    assert (launch.dtype, launch.max_num_seqs, launch.seed) == ("float32", 24, 7)
    assert launch.max_model_len == 256  # the toy model's max_position_embeddings
    assert launch.kv_cache_bytes == 1 << 28
    assert not launch.enable_sleep_mode  # colocated, but on CPU vLLM has no sleep mode
    on_cuda = load_config(None, [*BASE[1:], f"model.path={toy_model_dir}", "engine.kind=vllm",
                                 f"engine.vllm.python={python}", "engine.vllm.device=cuda", "colocate=true"])
    assert vllm_launch(engine_spec(on_cuda, pad_token_id=0)).enable_sleep_mode  # colocated: offload.rollout
    too_long = load_config(None, [*BASE[1:], f"model.path={toy_model_dir}", "engine.kind=vllm",
                                  f"engine.vllm.python={python}", "engine.vllm.max_model_len=4096"])
    with pytest.raises(ConfigError, match="exceeds the model's max_position_embeddings=256"):
        vllm_launch(engine_spec(too_long, pad_token_id=0))


def test_heron_check_fails_fast_without_the_vllm_venv(toy_model_dir, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "1+1=", "label": "2"}\n')
    cfg = load_config(None, [f"model.path={toy_model_dir}", f"data.path={data}", "engine.kind=vllm",
                             f"engine.vllm.python={tmp_path / 'missing' / 'python'}"])
    with pytest.raises(ConfigError, match="run `make vllm-venv`"):
        preflight(cfg)


def test_the_embedded_engine_holds_its_own_dtype_and_casts_pushed_weights(toy_model_dir):
    """engine.embedded.dtype=bfloat16 under a float32 trainer (what serving engines do): the
    engine's copy is bfloat16, a float32 push lands as its bfloat16 rounding, the version moves."""
    import torch
    from transformers import AutoModelForCausalLM

    from heron.records import GenerationRequest, SamplingParams
    from heron.rollout.registry import build_engine
    from heron.weights.handle import InMemory, WeightHandle

    cfg = load_config(None, [f"model.path={toy_model_dir}", "data.path=d.jsonl", "engine.embedded.dtype=bfloat16", "run.allow_emulated_bf16=true"])
    assert cfg.model.dtype == "float32"
    engine = build_engine(engine_spec(cfg, pad_token_id=0))
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    trained = AutoModelForCausalLM.from_pretrained(toy_model_dir, dtype=torch.float32).state_dict()
    trained = {k: v + 0.01 for k, v in trained.items()}  # float32 values bfloat16 rounds
    engine.load_weights(WeightHandle(3, InMemory(trained)))
    for name, tensor in engine.model.state_dict().items():
        assert torch.equal(tensor, trained[name].to(torch.bfloat16)), name
    [gen] = engine.generate([GenerationRequest([5, 6, 7], SamplingParams(max_new_tokens=4, seed=1))])
    assert gen.policy_version == 3 and len(gen.tokens) == len(gen.logprobs) > 0
    assert load_config(None, BASE).engine.embedded.dtype == ""  # default: model.dtype
