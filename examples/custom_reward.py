"""A custom reward: partial credit for addition answers.

    heron train ... reward.fn=examples/custom_reward.py:digit_credit

1.0 for the exact answer; otherwise the fraction of the label's digits that the response has
right (aligned from the right, where carries go), times 0.5, so a near miss beats noise but
never a correct answer. Signature of the ``reward`` hook point: ``(prompt, response) -> float``.
"""


def digit_credit(prompt, response: str) -> float:
    answer, label = response.strip(), prompt.label.strip()
    if answer == label:
        return 1.0
    if not answer.isdigit() or not label:
        return 0.0
    right = sum(a == b for a, b in zip(reversed(answer), reversed(label)))
    length_penalty = abs(len(answer) - len(label))
    return 0.5 * max(right - length_penalty, 0) / len(label)
