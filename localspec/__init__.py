"""localspec: local speculative decoding on GGUF models.

The packages are the layers, each importing only from those below it (docs/architecture.md):

- front-ends: :mod:`localspec.cli`, :mod:`localspec.bench`, :mod:`localspec.tui`, :mod:`localspec.server`
- :mod:`localspec.app`: what the front-ends share (catalog, loader, flags, settings file, jobs)
- :mod:`localspec.backend`: llama.cpp (:mod:`localspec.backend.llama` loads it) and this machine
- :mod:`localspec.core`: the speculative loop (drafting, acceptance, sampling, cost model, rounds)
- :mod:`localspec.config`, :mod:`localspec.errors`: settings models and the error types

Calls flow down (front-end -> app -> backend, core); the loader hands the engine (core) the models it
made (backend), which the engine sees only through a small interface; events flow back.
"""

__version__ = "0.1.0"
