"""The model backend: llama.cpp through llama-cpp-python, and the facts of this machine.

:mod:`.llama` is the only module that imports ``llama_cpp`` (load, tokenize, decode, logits,
rollback); :mod:`.machine` reads the CPU, :mod:`.load` how busy it is, :mod:`.cache_keys` what
cached measurements depend on; :mod:`.calibration` measures this machine's
verification-cost curve for a loaded model; :mod:`.repack` probes llama.cpp's weight
repacking in a child process; :mod:`.hugepages` reads weights into transparent huge pages.
"""
