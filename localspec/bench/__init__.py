"""``localspec bench``: our modes and llama-cpp-python's side by side, in one process.

For every task of a built-in suite (plus user prompts), every mode runs ``--repeats``
times; the order of the modes alternates (forwards, backwards) between repetitions,
and each run's speed is divided by target-only decoding (ours) of the same repetition.
The reported speedup is the median of those ratios, so a machine that gets busier or
quieter during the run moves numerator and denominator together.

Modes: ``target`` (ours, no speculation), ``peer-target`` (llama-cpp-python
``create_completion``), ``lookup gN`` (our prompt lookup, draft length N),
``peer-lookup nN`` (llama-cpp-python ``LlamaPromptLookupDecoding(num_pred_tokens=N)``),
``draft gN`` (our draft model, fixed draft length N) and ``auto``.

Greedy decoding throughout; the token ids of our modes are checked equal to
target-only decoding, and a difference is reported with its position and the target's
top-2 logit gap there (``shared/cases.md`` C1).

The package: :mod:`.suite` (the tasks), :mod:`.runner` (running them, metering the machine),
:mod:`.peer` (llama-cpp-python's ``Llama``, the peer modes), :mod:`.report` (medians, oracle,
goals, table, plot), :mod:`.command` (``localspec bench``).
"""

from localspec.bench.command import cli_bench
from localspec.bench.report import Run, format_table, oracle_row, plot, summarise
from localspec.bench.runner import CpuMeter, Mode, build_modes, run_bench, wait_for_idle
from localspec.bench.suite import _EDIT_FILE, BUILTIN_TASKS, QUICK_TASKS, Task, load_user_prompts

__all__ = ["cli_bench", "format_table", "oracle_row", "plot", "summarise", "CpuMeter", "Mode", "Run", "build_modes",
           "run_bench", "wait_for_idle", "_EDIT_FILE", "BUILTIN_TASKS", "QUICK_TASKS", "Task", "load_user_prompts"]
