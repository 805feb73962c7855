"""Everything the demo and the tests need, created locally: a toy task, a tokenizer trained
on it, and a small causal LM with random weights, saved as ordinary HF folders."""
