"""Real GGUF models: the tiny SmolLM2-135M (fast) and the Qwen2.5-Coder 1.5B/0.5B pair.

``tiny_engine`` and ``pair_engine`` come from tests/conftest.py.
"""
