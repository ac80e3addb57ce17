"""The model backend: llama.cpp through llama-cpp-python, and the facts of this machine.

:mod:`.llama` loads llama.cpp and holds the native model (load, tokenize, decode, logits,
rollback), :mod:`.grammar` its grammar sampler and :mod:`.chat_template` the chat prompt's
markup/content split (pure text); of the package only :mod:`.llama` and :mod:`.grammar` import
``llama_cpp`` (and :mod:`localspec.bench.peer`, the benchmark's llama-cpp-python peer);
:mod:`.machine` reads the CPU, :mod:`.load` how busy it is, :mod:`.cache_keys` what
cached measurements depend on; :mod:`.calibration` measures this machine's
verification-cost curve for a loaded model; :mod:`.repack` probes llama.cpp's weight
repacking in a child process; :mod:`.hugepages` reads weights into transparent huge pages;
:mod:`.native` is what every class holding a llama.cpp handle shares (closing it).
"""
