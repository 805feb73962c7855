"""A byte-level BPE tokenizer trained locally with ``tokenizers`` and saved as an HF folder.

Digits are pre-tokenized one by one so numbers stay digit sequences (BPE merges of digit
pairs make arithmetic much harder to learn for a tiny model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

EOS = "<|endoftext|>"
PAD = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [EOS, PAD, IM_START, IM_END]

# A minimal ChatML template, so chat-formatted datasets work with the toy tokenizer too.
CHAT_TEMPLATE = (
    "{% for m in messages %}" + IM_START + "{{ m['role'] }}\n{{ m['content'] }}" + IM_END + "\n{% endfor %}"
    "{% if add_generation_prompt %}" + IM_START + "assistant\n{% endif %}"
)


def train_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: Path):
    """Trains the tokenizer on ``corpus`` and saves it to ``out_dir``; returns the HF tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, pad_token=PAD, clean_up_tokenization_spaces=False
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(out_dir)
    return hf_tok
