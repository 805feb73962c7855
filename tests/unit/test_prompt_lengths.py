"""The prompt-length check and its fast path (issue 9, item 2.10). The fast path skips the
tokenizer for prompts whose UTF-8 size already proves they fit; these tests check the proof's
one constant over every code point, the bound against real tokenizers on hostile text, that
it refuses tokenizers it cannot reason about, and that it gives exactly the verdict of
tokenizing every prompt."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from heron.data import prompt_lengths
from heron.data.dataset import PromptDataset
from heron.data.prompt_lengths import TokenBudget, check_prompt_lengths, tokens_per_byte
from heron.data.rows import DataError
from heron.records import Prompt
from heron.rollout.prompt_format import PromptFormatter

HOSTILE = [
    "", " ", "a", "1+1=", "    \t\n", "ΐ" * 50, "\u1f82" * 40, "\U0001d1c0" * 30, "ﬁ" * 20, "ﷺ" * 10, "é" * 30,
    "e\u0301" * 30, "🤖" * 25, "\u0958\u0959" * 20, "Hello, world! 12345 " * 10, "\x00\x01\x02", "<|endoftext|>" * 5,
]


def test_nfd_grows_utf8_text_at_most_three_times():
    """The NFC factor of the bound: NFC never exceeds NFD (composition only shrinks), and NFD
    is a per-character mapping, so the worst single code point bounds every text."""
    worst = max(
        len(unicodedata.normalize("NFD", chr(c)).encode()) / len(chr(c).encode())
        for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF
    )
    assert worst <= prompt_lengths._NORMALIZER_GROWTH["NFC"] == 3


def _bpe(normalizer=None, pre_tokenizer=None, model=None, trainer=None) -> PreTrainedTokenizerFast:
    tok = Tokenizer(model or models.BPE(unk_token="[UNK]"))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = ["Hello, world! 12 + 30 = 42.", "é ΐ ﬁ 🤖 abc def", "the quick brown fox"] * 20
    tok.train_from_iterator(corpus, trainer or trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<|endoftext|>"],
                                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def _tokenizers(toy_model_dir):
    return {
        "toy": AutoTokenizer.from_pretrained(toy_model_dir),
        "bytelevel": _bpe(),
        "bytelevel-prefix-space": _bpe(pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=True)),
        "nfc-whitespace": _bpe(normalizers.NFC(), pre_tokenizers.Whitespace()),
    }


def test_the_bound_holds_on_hostile_text(toy_model_dir):
    for name, tok in _tokenizers(toy_model_dir).items():
        bound = tokens_per_byte(tok)
        assert bound is not None, name
        a, b = bound
        for text in HOSTILE:
            n = len(tok(text, add_special_tokens=False)["input_ids"])
            assert n <= a * len(text.encode()) + b, (name, text, n, bound)


def test_tokenizers_the_bound_cannot_cover_are_refused():
    refused = {
        "nfkc": _bpe(normalizers.NFKC()),  # "ﷺ" becomes 18 characters
        "metaspace": _bpe(pre_tokenizer=pre_tokenizers.Metaspace()),  # inserts "▁"
        "prepend": _bpe(normalizers.Sequence([normalizers.Prepend("▁")])),
        "wordpiece": _bpe(pre_tokenizer=pre_tokenizers.Whitespace(), model=models.WordPiece(unk_token="[UNK]"),
                          trainer=trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "<|endoftext|>"])),
    }
    for name, tok in refused.items():
        assert tokens_per_byte(tok) is None, name


def _dataset(texts: list[str]) -> PromptDataset:
    prompts = [Prompt(prompt_id=i, text=t, label="1") for i, t in enumerate(texts)]
    return PromptDataset("d.jsonl", prompts, [], [f"d.jsonl:{i + 1}" for i in range(len(texts))])


def test_short_prompts_are_never_tokenized_and_long_ones_are_measured(toy_model_dir):
    formatter = PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir))
    budget = TokenBudget(max_positions=256, max_new_tokens=16, new_tokens_key="rollout.max_new_tokens")
    short = check_prompt_lengths(_dataset(["12+30="] * 1000), formatter, budget, "error", "error")
    assert short.num_tokenized == 0 and len(short.dataset.prompts) == 1000
    mixed = check_prompt_lengths(_dataset(["12+30="] * 10 + ["1+1=" * 59, "1+1=" * 61]), formatter, budget, "error", "drop")
    assert mixed.num_tokenized == 1  # 236 bytes cannot exceed 240 tokens; only the 244-byte one is measured
    assert [p.prompt_id for p in mixed.dataset.prompts] == list(range(11))
    assert mixed.dataset.bad_rows == []  # too long is not malformed: counted apart (data/dropped_long_prompts)
    assert mixed.dataset.long_prompts == [
        "d.jsonl:12: the prompt is 244 tokens; with rollout.max_new_tokens=16 it needs 260 positions but the model "
        "has 256 (max_position_embeddings); shorten it or lower rollout.max_new_tokens"
    ]
    with pytest.raises(DataError, match=r"^d.jsonl:12: the prompt is 244 tokens.*\(or set data.on_long_prompt=drop\)$"):
        check_prompt_lengths(_dataset(["12+30="] * 10 + ["1+1=" * 59, "1+1=" * 61]), formatter, budget, "skip", "error")


@pytest.mark.parametrize("chat", [False, True])
def test_the_fast_path_gives_the_verdict_of_tokenizing_everything(toy_model_dir, monkeypatch, chat):
    formatter = PromptFormatter(AutoTokenizer.from_pretrained(toy_model_dir), apply_chat_template=chat)
    texts = [("9+" * k) + "=" for k in range(100, 140)] + [t * 8 for t in HOSTILE if t.strip()]
    budget = TokenBudget(max_positions=256, max_new_tokens=8, new_tokens_key="rollout.max_new_tokens")
    fast = check_prompt_lengths(_dataset(texts), formatter, budget, "skip", "drop")
    monkeypatch.setattr(prompt_lengths, "tokens_per_byte", lambda tokenizer: None)
    exact = check_prompt_lengths(_dataset(texts), formatter, budget, "skip", "drop")
    assert exact.num_tokenized == len(texts) > fast.num_tokenized
    assert fast.dataset == exact.dataset and 0 < len(fast.dataset.long_prompts) < len(texts)
