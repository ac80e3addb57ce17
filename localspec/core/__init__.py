"""The speculation core: what localspec owns.

Drafting (:mod:`.drafters`), the acceptance rule (:mod:`.acceptance`), sampling math
(:mod:`.sampling`), the cost model and draft policy (:mod:`.costmodel`, :mod:`.policy`),
tokens to text with stop strings (:mod:`.streaming`), the target and draft vocabularies'
compatibility (:mod:`.tokenizer`), and the round loop with rollback and statistics
(:mod:`.engine`), which yields :class:`.events.TokenEvent` values. Nothing here imports llama_cpp, reads a file or prints:
models come in as objects with a small interface (tokenize, decode, logits, rollback).
"""
