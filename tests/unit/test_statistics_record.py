"""One record of each statistic (:class:`localspec.core.events.GenerationStats`, :class:`RoundStats`):
every output that shows a figure takes its key from the record's declaration, and no other module of
localspec spells a figure's name again.

The pinned key lists below are the outputs' contract (``generate --json``, the server's ``speculation``,
``/metrics``): a change to them is a change users see.
"""

import ast
import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from localspec.cli import _json_line, _stats_line
from localspec.core.events import DrafterId, EndReason, GenerationStats, RoundStats, TokenKind
from localspec.core.figures import figures, view_names
from localspec.server.metrics import ServerMetrics
from localspec.server.shapes import speculation
from localspec.tui.stats import LiveStats

ROOT = Path(__file__).resolve().parents[2]

STATS_KEYS = ["prompt_tokens", "cached_prompt_tokens", "tokens", "rounds", "target_passes", "drafted", "accepted",
              "drafting_rounds", "acceptance_rate", "mean_accepted_length", "tokens_per_target_pass",
              "tokens_per_second", "time_to_first_token", "prefill_seconds", "draft_seconds", "verify_seconds",
              "catchup_tokens", "catchup_seconds", "round_seconds", "pass_seconds", "overhead_seconds",
              "overhead_seconds_per_round", "overhead_seconds_per_drafted_token", "decode_seconds", "elapsed_seconds",
              "end_reason", "kinds"]
SPECULATION_KEYS = ["mode", "draft_max", "drafted", "accepted", "rounds", "target_passes", "acceptance_rate",
                    "mean_accepted_length", "tokens_per_target_pass", "tokens_per_second", "time_to_first_token",
                    "prefill_seconds", "elapsed_seconds", "end_reason", "overhead_seconds_per_round",
                    "overhead_seconds_per_drafted_token", "drafters", "memory"]
ROUND_KEYS = ["type", "round", "drafter", "drafted", "accepted", "committed", "draft_tokens", "target_tokens",
              "draft_seconds", "verify_seconds", "draft_len_chosen", "reason", "round_seconds", "pass_seconds"]
FIGURE_METRICS = {"localspec_prompt_tokens", "localspec_prompt_tokens_cached", "localspec_prompt_tokens_read",
                  "localspec_tokens_predicted", "localspec_rounds", "localspec_prefill_seconds",
                  "localspec_draft_seconds", "localspec_verify_seconds", "localspec_request_seconds",
                  "localspec_pass_seconds", "localspec_round_overhead_seconds"}

#: modules that fill the record rather than show it
FILLERS = {"localspec/core/events.py", "localspec/core/engine.py"}
#: (module, name): a string equal to a figure's name that is another object's key, not the figure
OTHER_KEYS = {
    ("localspec/server/shapes.py", "prompt_tokens"),  # OpenAI's usage object
    ("localspec/server/responses.py", "prompt_tokens"),  # the Responses API's usage (read from chat's)
    ("localspec/bench/report.py", "decode_seconds"),  # a run's seconds inside llama.cpp's decode calls
    ("localspec/bench/report.py", "acceptance_rate"),  # format_table reading a saved row
    ("localspec/bench/report.py", "mean_accepted_length"),  # format_table reading a saved row
    ("localspec/bench/report.py", "overhead_seconds_per_round"),  # format_table and the goals reading a saved row
    ("localspec/bench/report.py", "overhead_seconds_per_drafted_token"),  # format_table reading a saved row
    ("localspec/bench/ui.py", "decode_seconds"),  # the UI benchmark's own result row
    ("localspec/tui/stats.py", "elapsed_seconds"),  # what conversations saved before it called "seconds"
}


def stats() -> GenerationStats:
    s = GenerationStats(prompt_tokens=10, cached_prompt_tokens=4, rounds=2, target_passes=2, drafted=4,
                        accepted=2, drafting_rounds=2, prefill_seconds=0.1, draft_seconds=0.02, verify_seconds=0.3,
                        elapsed_seconds=0.9, time_to_first_token=0.15, end_reason=EndReason.EOG, catchup_tokens=2,
                        catchup_seconds=0.01, round_seconds=0.75, pass_seconds=0.55)
    for kind in (TokenKind.ACCEPTED, TokenKind.ACCEPTED, TokenKind.BONUS):
        s.add_token(kind)
    return s


def round_stats() -> RoundStats:
    return RoundStats(0, DrafterId.LOOKUP, (1, 2), (1, 3), 2, 1, 2, 0.01, 0.02, 4, "why", 1, 0.1, 0.2, True)


def test_the_outputs_keys_are_the_record_s_in_its_order():
    line = json.loads(_stats_line(stats(), "text"))
    assert list(line) == ["type", *STATS_KEYS, "text"] == ["type", *stats().as_dict(), "text"]
    spec = speculation("auto", stats(), [round_stats()], 8, True)
    assert list(spec) == SPECULATION_KEYS == ["mode", "draft_max", *view_names(GenerationStats, "speculation"),
                                              "drafters", "memory"]
    assert list(json.loads(_json_line(round_stats()))) == ROUND_KEYS == ["type", *view_names(RoundStats, "line")]
    assert spec["time_to_first_token"] == 0.15 and spec["end_reason"] == "eog" and spec["acceptance_rate"] == 0.5
    assert line["kinds"] == {"accepted": 2, "bonus": 1} and line["decode_seconds"] == 0.9 - 0.1 - 0.01
    # the rounds' time outside llama.cpp's passes: 0.2 s over 2 rounds and 4 drafted tokens
    assert abs(line["overhead_seconds"] - 0.2) < 1e-12 and abs(spec["overhead_seconds_per_round"] - 0.1) < 1e-12
    assert abs(spec["overhead_seconds_per_drafted_token"] - 0.05) < 1e-12
    assert GenerationStats().overhead_seconds_per_round is None and GenerationStats(rounds=1).overhead_seconds == 0.0


def test_metrics_has_one_series_per_figure_the_record_gives_a_metric():
    declared = {f.metric.name: f.name for f in figures(GenerationStats) if f.metric is not None}
    assert set(declared) == FIGURE_METRICS
    m = ServerMetrics(lambda: 0, lambda: 0)

    class Gen:
        stats, rounds = stats(), [round_stats()]

    m.observe(Gen())
    m.observe(Gen())
    families = {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}
    assert FIGURE_METRICS <= set(families)
    value = {f: next(s.value for s in families[f].samples if s.name in (f + "_total", f + "_sum"))
             for f in FIGURE_METRICS}
    assert value["localspec_prompt_tokens_cached"] == 8 and value["localspec_prompt_tokens_read"] == 12
    assert value["localspec_request_seconds"] == 1.8 and value["localspec_rounds"] == 4
    assert abs(value["localspec_round_overhead_seconds"] - 0.4) < 1e-12 and value["localspec_pass_seconds"] == 1.1


def test_add_sums_the_figures_declared_summed_and_keeps_the_others():
    total = GenerationStats(prompt_tokens=7)
    total.add(stats())
    total.add(stats())
    assert total.tokens == 6 and total.cached_prompt_tokens == 8 and total.kinds == {"accepted": 4, "bonus": 2}
    assert total.prompt_tokens == 7 and total.time_to_first_token is None and total.end_reason is None


def test_a_record_comes_back_from_its_dict():
    back = GenerationStats.from_dict(stats().as_dict())
    assert back == stats() and back.end_reason is EndReason.EOG
    assert GenerationStats.from_dict({"end_reason": "no such reason"}).end_reason is None
    live = LiveStats.from_dict({**LiveStats().sync(stats()).as_dict(), "accepted_lengths": [1, 1]})
    assert live.as_dict() == {**stats().as_dict(), "accepted_lengths": [1, 1]}


def _figure_strings(path: Path, names: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names}


def test_no_module_spells_a_figure_s_name_the_record_already_names():
    """A figure's name lives in its declaration: the outputs take it from there (``as_dict``, ``view``,
    the ``metric``). Names of one word (``tokens``, ``rounds``, ``drafted``...) are also other objects'
    keys (a drafter's tallies, OpenAI's usage) and are not checked."""
    names = {f.name for record in (GenerationStats, RoundStats) for f in figures(record) if "_" in f.name}
    found = set()
    for path in sorted((ROOT / "localspec").rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if module not in FILLERS:
            found |= {(module, name) for name in _figure_strings(path, names)}
    assert found - OTHER_KEYS == set(), "take the key from the record (GenerationStats.as_dict / view / figures)"
    assert OTHER_KEYS <= found, "an exception that is no longer needed: remove it from OTHER_KEYS"
