"""localspec: local speculative decoding on GGUF models.

Data flows one way: CLI/TUI -> engine -> drafters / verify / backend, and events
flow back. Only :mod:`localspec.backend` imports llama_cpp.
"""

__version__ = "0.1.0"
