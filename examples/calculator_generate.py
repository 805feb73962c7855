"""Multi-turn tool use: the policy thinks, a calculator answers, the policy answers.

    heron train ... hooks.generate=examples/calculator_generate.py:generate reward.fn=exact_match

One sample, three parts of its response:
1. the policy's first turn (up to ``hooks.args.think_tokens`` tokens, default 4);
2. the calculator's output ``[calc: <value>]``: it evaluates the last ``a+b`` expression in the
   policy's turn, or the prompt's when the policy wrote none. These tokens come from the
   environment: loss_mask 0 and logprob 0.0, so the policy is never trained to produce them;
3. the policy's final answer (rollout.max_new_tokens), conditioned on everything before.

The reward sees only the final answer (``response_text``), so copying the tool's number into
the answer is what earns reward. Every engine call uses the run's seeds (``ctx.params`` with a
turn number), so the run stays reproducible.
"""

from __future__ import annotations

import re

_SUM = re.compile(r"(\d+)\s*\+\s*(\d+)")


def calculator(text: str) -> str | None:
    """The value of the last ``a+b`` in ``text`` (None when there is none)."""
    found = _SUM.findall(text)
    if not found:
        return None
    a, b = found[-1]
    return str(int(a) + int(b))


def generate(ctx, prompt, sample_index):
    prompt_tokens = ctx.encode(prompt)
    think = ctx.generate(prompt_tokens, ctx.params(prompt, sample_index, turn=0, max_new_tokens=int(ctx.args.get("think_tokens", 4))))
    value = calculator(ctx.decode(think.tokens)) or calculator(prompt.text) or "?"
    tool = ctx.encode_text(f"[calc: {value}]")
    context = prompt_tokens + think.tokens + tool
    answer = ctx.generate(context, ctx.params(prompt, sample_index, turn=1))
    return ctx.make_sample(
        prompt, sample_index, prompt_tokens,
        response_tokens=think.tokens + tool + answer.tokens,
        response_logprobs=think.logprobs + [0.0] * len(tool) + answer.logprobs,
        loss_mask=[1] * len(think.tokens) + [0] * len(tool) + [1] * len(answer.tokens),
        finish_reason=answer.finish_reason,
        policy_version=min(think.policy_version, answer.policy_version),
        response_text=ctx.decode(answer.tokens),
    )
