"""The pre-flight against real folders, files and a real toy model (issue 9, items 2.6, 2.10,
2.14): each broken input is one line before any model loads, and a check leaves nothing
behind. The same checks run in ``heron train`` (through RLRun, before it locks run.dir) and ``heron check``;
test_cli_preflight.py drives both through the real command line."""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from heron.errors import UserError
from heron.preflight import preflight, preflight_sft
from heron.preflight.writable import check_writable
from heron.toy.addition import make_prompts, write_jsonl


@pytest.fixture
def config(run_config):
    """A toy run's config with eval on again (run_config turns it off) unless overridden."""
    return lambda *overrides: run_config("eval.interval=5", *overrides)


def _error(cfg) -> str:
    with pytest.raises(UserError) as e:
        preflight(cfg)
    message = str(e.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --- writable output folders (2.6) ----------------------------------------------------------------


def test_a_file_in_the_way_of_run_dir_or_checkpoint_dir_is_one_line(config, tmp_path):
    (tmp_path / "a-file").write_text("x")
    assert "run.dir" in _error(config(f"run.dir={tmp_path / 'a-file' / 'run'}"))
    message = _error(config(f"checkpoint.dir={tmp_path / 'a-file' / 'ckpt'}"))
    assert message.startswith("checkpoint.dir") and "is a file" in message
    assert _error(config(f"run.dir={tmp_path / 'a-file'}")).startswith("run.dir")


@contextmanager
def _unwritable_folder(path: Path):
    """A folder this process cannot write into: mode 0555, and immutable where root ignores the mode."""
    path.mkdir()
    path.chmod(0o555)
    immutable = False
    try:
        probe = path / "probe"
        try:
            probe.write_text("x")
            probe.unlink()
            immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("running as root without chattr: no folder here is unwritable")
        except PermissionError:
            pass
        yield path
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        path.chmod(0o755)


@pytest.mark.parametrize("key", ["run.dir", "checkpoint.dir"])
def test_an_unwritable_folder_is_found_before_the_model_loads(config, tmp_path, key):
    with _unwritable_folder(tmp_path / "locked") as locked:
        message = _error(config(f"{key}={locked / 'out'}"))
    assert message.startswith(f"{key} '") and "not writable" in message


def test_the_check_leaves_no_folder_behind_and_keeps_what_was_there(config, tmp_path):
    run_dir = tmp_path / "new" / "nested" / "run"
    preflight(config(f"run.dir={run_dir}"))
    assert not (tmp_path / "new").exists()  # heron check runs nothing, so it creates nothing
    existing = tmp_path / "existing"
    (existing / "checkpoints").mkdir(parents=True)
    (existing / "metrics.jsonl").write_text("{}\n")
    before = _tree(existing)
    preflight(config(f"run.dir={existing}"))
    assert _tree(existing) == before


def test_a_check_that_fails_later_leaves_no_half_made_run_dir(config, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "", "label": "1"}\n')
    run_dir = tmp_path / "fresh" / "run"
    _error(config(f"run.dir={run_dir}", f"data.path={bad}"))
    assert not (tmp_path / "fresh").exists()


def test_check_writable_names_the_key_and_the_cause(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"^sft.output '.*' cannot be a folder: '.*/f' is a file"):
        check_writable(tmp_path / "f" / "x" / "y", "sft.output")
    check_writable(tmp_path / "a" / ".." / "b", "run.dir")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


# --- broken model folders (2.14) --------------------------------------------------------------------


def _no_config(m: Path):
    (m / "config.json").unlink()


def _invalid_json(m: Path):
    (m / "config.json").write_text('{"model_type": "qwen3",')


def _unknown_model_type(m: Path):
    (m / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))


def _not_a_causal_lm(m: Path):
    (m / "config.json").write_text(json.dumps({"model_type": "t5"}))


def _no_weights(m: Path):
    (m / "model.safetensors").unlink()


def _truncated_weights(m: Path):
    data = (m / "model.safetensors").read_bytes()
    (m / "model.safetensors").write_bytes(data[: len(data) // 2])


def _index_with_a_missing_shard(m: Path):
    (m / "model.safetensors").rename(m / "model-00001-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (m / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _no_tokenizer(m: Path):
    for f in m.glob("tokenizer*"):
        f.unlink()


def _no_eos(m: Path):
    cfg = json.loads((m / "tokenizer_config.json").read_text())
    cfg["eos_token"] = None
    (m / "tokenizer_config.json").write_text(json.dumps(cfg))


BROKEN = [
    (_no_config, "is not an HF model folder (no config.json)"),
    (_invalid_json, "config.json is not valid JSON"),
    (_unknown_model_type, "transformers cannot read its config.json"),
    (_not_a_causal_lm, "is not a causal LM"),
    (_no_weights, "has no weights"),
    (_truncated_weights, "model.safetensors is not a readable safetensors file"),
    (_index_with_a_missing_shard, "weight file model-00002-of-00002.safetensors (listed in its index) is missing"),
    (_no_tokenizer, "has no usable tokenizer"),
    (_no_eos, "has no eos_token"),
]


@pytest.mark.parametrize("breakage,message", BROKEN, ids=[b.__name__.strip("_") for b, _ in BROKEN])
def test_a_broken_model_folder_is_one_line(config, toy_model_dir, tmp_path, breakage, message):
    model = Path(shutil.copytree(toy_model_dir, tmp_path / "model"))
    breakage(model)
    found = _error(config(f"model.path={model}"))
    assert found.startswith(f"model.path '{model}'") and message in found


# --- data (2.10) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("row", [
    {"prompt": "", "label": "1"},
    {"prompt": "  \n ", "label": "1"},
    {"prompt": [{"role": "user", "content": " "}], "label": "1"},
])
def test_an_empty_prompt_is_a_data_error_with_file_and_line(config, tmp_path, row):
    path = tmp_path / "d.jsonl"
    write_jsonl(make_prompts(2, seed=0, max_digits=2), path)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")
    message = _error(config(f"data.path={path}", "data.apply_chat_template=true"))
    assert message.startswith(f"{path}:3: ") and "empty" in message and "data.on_bad_row=skip" in message


def _long_prompt_file(tmp_path, num_tokens_wanted: int) -> Path:
    path = tmp_path / "long.jsonl"
    write_jsonl(make_prompts(3, seed=0, max_digits=2), path)
    with path.open("a") as f:  # "1+1=" is 4 tokens for the toy tokenizer (single digits, + and =)
        f.write(json.dumps({"prompt": "1+1=" * (num_tokens_wanted // 4), "label": "2"}) + "\n")
    return path


def test_a_prompt_longer_than_the_model_context_is_a_data_error(config, tmp_path):
    path = _long_prompt_file(tmp_path, 1200)  # the case: 1,202 tokens on 256 positions
    message = _error(config(f"data.path={path}", "rollout.max_new_tokens=16"))
    assert message.startswith(f"{path}:4: the prompt is 1200 tokens")
    assert "rollout.max_new_tokens=16" in message and "1216 positions" in message and "256" in message


def test_a_prompt_that_fits_only_without_the_new_tokens_is_refused(config, tmp_path):
    path = _long_prompt_file(tmp_path, 240)
    preflight(config(f"data.path={path}", "rollout.max_new_tokens=16"))  # 240 + 16 = 256: fits exactly
    assert "240 tokens" in _error(config(f"data.path={path}", "rollout.max_new_tokens=17"))


def test_skip_drops_bad_rows_counts_them_and_hands_the_rest_to_the_run(config, tmp_path):
    path = _long_prompt_file(tmp_path, 1200)
    with path.open("a") as f:
        f.write(json.dumps({"prompt": "", "label": "1"}) + "\n")
    assert "data.on_long_prompt=drop" in _error(config(f"data.path={path}", "data.on_bad_row=skip"))
    report = preflight(config(f"data.path={path}", "data.on_bad_row=skip", "data.on_long_prompt=drop"))
    dataset = report.train_data
    assert [p.prompt_id for p in dataset.prompts] == [0, 1, 2]  # ids are row indices, bad rows included
    assert len(dataset.bad_rows) == 1 and len(dataset.long_prompts) == 1
    assert any("1 bad rows skipped; 1 long prompts dropped" in line for line in report.lines)


def test_eval_sets_are_checked_with_eval_max_new_tokens(config, tmp_path):
    path = _long_prompt_file(tmp_path, 240)
    report = preflight(config(f"eval.sets.long={path}", "eval.max_new_tokens=16"))
    assert len(report.eval_sets["long"].prompts) == 4
    message = _error(config(f"eval.sets.long={path}", "eval.max_new_tokens=20"))
    assert message.startswith(f"{path}:4: the prompt is 240 tokens") and "eval.max_new_tokens=20" in message
    preflight(config(f"eval.sets.long={path}", "eval.max_new_tokens=20", "eval.interval=0"))  # eval off: not loaded


def test_max_new_tokens_that_leave_no_room_for_a_prompt(config):
    assert "rollout.max_new_tokens=256 leaves no room for a prompt" in _error(config("rollout.max_new_tokens=256"))


def test_a_multi_token_stop_string_is_a_config_error(config):
    assert "rollout.stop entry '12+' is 3 tokens" in _error(config("rollout.stop=['12+']"))


def test_a_chat_template_prompt_is_measured_with_its_template(config, tmp_path):
    """240 tokens of text fit 256 - 16 positions, not once the chat template wraps them."""
    path = _long_prompt_file(tmp_path, 240)
    preflight(config(f"data.path={path}", "rollout.max_new_tokens=16"))
    assert "the prompt is" in _error(config(f"data.path={path}", "rollout.max_new_tokens=16", "data.apply_chat_template=true"))


def test_sft_checks_its_examples_output_and_model(config, tmp_path):
    path = _long_prompt_file(tmp_path, 256)  # fits no answer: each label is >= 1 token, + eos
    out = tmp_path / "sft-out"
    with pytest.raises(UserError, match=r":4: the prompt is 256 tokens; with the longest label \+ eos="):
        preflight_sft(config(f"data.path={path}"), out)
    assert not out.exists()
    model, _, examples = preflight_sft(config(), out)
    assert model.max_positions == 256 and len(examples.prompts) == 64 and not out.exists()


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_requested_without_cuda_is_one_line_before_the_model_loads(config):
    message = _error(config("run.device=cuda"))
    assert message.startswith("run.device=cuda but this machine has no usable CUDA device")


def test_the_report_names_the_resolved_device(config):
    assert "device: run.device=cpu -> cpu" in preflight(config("run.device=cpu")).lines
