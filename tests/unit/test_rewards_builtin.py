"""Built-in rewards on hand-picked cases, including math answers written in different forms."""

import pytest

from heron.records import Prompt
from heron.reward.builtin import exact_match, numeric_match
from heron.reward.math_answer import extract_final_answer, math_match


def P(label: str) -> Prompt:
    return Prompt(prompt_id=0, text="q", label=label)


@pytest.mark.parametrize("response, expected", [("47", 1.0), (" 47\n", 1.0), ("047", 0.0), ("47.0", 0.0), ("", 0.0)])
def test_exact_match(response, expected):
    assert exact_match(P("47"), response) == expected


@pytest.mark.parametrize(
    "label, response, expected",
    [
        ("47", "the sum is 47", 1.0),
        ("0.5", "1/2", 1.0),
        ("1/2", "it is 0.50", 1.0),
        ("1000", "costs 1,000 dollars", 1.0),
        ("-3", "x = -3", 1.0),
        ("47", "47 or maybe 48", 0.0),  # the LAST number counts
        ("47", "no number", 0.0),
        ("abc", "47", 0.0),  # a non-numeric label never matches
    ],
)
def test_numeric_match(label, response, expected):
    assert numeric_match(P(label), response) == expected


@pytest.mark.parametrize(
    "response",
    ["\\boxed{1/2}", "0.5", "\\frac{1}{2}", "The answer is \\frac12.", "so #### 0.50", "we get $\\dfrac{1}{2}$", "\\boxed{\\frac{2}{4}}"],
)
@pytest.mark.parametrize("label", ["1/2", "\\frac{1}{2}", "0.5", "\\boxed{1/2}"])
def test_math_answers_in_different_forms_agree(label, response):
    assert math_match(P(label), response) == 1.0


@pytest.mark.parametrize(
    "label, response",
    [("1/2", "\\boxed{1/3}"), ("1/2", "2"), ("1/2", "first 1/2, then \\boxed{3}"), ("\\sqrt{2}", "1.41"), ("1/2", "no idea")],
)
def test_math_wrong_answers(label, response):
    assert math_match(P(label), response) == 0.0


def test_math_symbolic_forms():
    assert math_match(P("\\sqrt{2}"), "thus \\boxed{\\sqrt 2}") == 1.0
    assert math_match(P("2x+1"), "\\boxed{1+2x}") == 1.0


@pytest.mark.parametrize(
    "text, answer",
    [
        ("a \\boxed{3} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # the last box, nested braces
        ("work... #### 42", "42"),
        ("So the answer is 7.", "7"),
        ("Answer: x=2", "x=2"),
        ("just 5", None),  # nothing marks an answer: math-verify parses the whole text
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_final_answer(text, answer):
    assert extract_final_answer(text) == answer
