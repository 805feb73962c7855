"""The TRL side of bench/vs_trl.py, run by ``.venv-trl/bin/python`` (it imports no heron).

TRL's GRPOTrainer on a local model folder and a JSONL of {"prompt", "label"} rows, with the
reward heron computes in bench/vs_trl.py (bench/length_reward.py, next to this file); one
optimizer step per rollout.
Writes {"step_s": [...], "generate_s": [...]} to argv[3]: wall seconds of each optimizer step
(generation included) and of the generation inside it (GRPOTrainer._generate: the policy's
``generate`` and decoding the completions).

    .venv-trl/bin/python bench/trl_grpo_peer.py MODEL_DIR DATA.jsonl OUT.json NUM_STEPS PROMPTS SAMPLES NEW_TOKENS LR PRECISION
"""

import json
import sys
import time

from length_reward import completion_lengths  # bench/, this script's folder: on sys.path


def main() -> None:
    from datasets import load_dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model_dir, data, out, num_steps, prompts, samples, new_tokens, lr, precision = sys.argv[1:10]
    compile_model = sys.argv[10:11] == ["compile"]  # TrainingArguments.torch_compile (bench/vs_trl.py --compile)
    samples = int(samples)
    times: list[float] = []
    generate_times: list[float] = [0.0]

    class StepTimes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.start)
            generate_times.append(0.0)

    cfg = GRPOConfig(
        output_dir=f"{out}.trainer", max_steps=int(num_steps), per_device_train_batch_size=int(prompts) * samples,
        num_generations=samples, max_completion_length=int(new_tokens), steps_per_generation=1, num_iterations=1,
        gradient_accumulation_steps=1, learning_rate=float(lr), beta=0.0, temperature=1.0, top_p=1.0,
        use_cpu=True, bf16=precision == "bf16", report_to="none", save_strategy="no", logging_steps=1,
        dataloader_num_workers=0, seed=0, torch_compile=compile_model,
    )
    trainer = GRPOTrainer(model=model_dir, reward_funcs=completion_lengths, args=cfg,
                          train_dataset=load_dataset("json", data_files=data, split="train"))
    trainer.add_callback(StepTimes())
    generate = trainer._generate

    def timed_generate(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            generate_times[-1] += time.perf_counter() - start

    trainer._generate = timed_generate
    trainer.train()
    with open(out, "w") as f:
        json.dump({"step_s": times, "generate_s": generate_times[: len(times)]}, f)


if __name__ == "__main__":
    main()
