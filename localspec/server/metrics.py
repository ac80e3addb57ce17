"""``GET /metrics``: Prometheus counters of the server (prometheus-client).

Names follow vLLM's speculative-decoding counters (``spec_decode_num_drafts``,
``spec_decode_num_draft_tokens``, ``spec_decode_num_accepted_tokens``,
``spec_decode_num_accepted_tokens_per_pos``) and llama.cpp's server
(``prompt_tokens``, ``tokens_predicted``, ``requests_processing``,
``requests_deferred``), with the prefix ``localspec_`` and a ``drafter`` label
(``draft``, ``lookup``, ``prediction``). Each app has its own registry. The series of a generation's
figures are those the statistics record declares with a ``metric``
(:class:`~localspec.core.events.GenerationStats`).
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST  # noqa: F401 - re-exported for the route
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from localspec.core.engine import Generation
from localspec.core.events import GenerationStats
from localspec.core.figures import figures
from localspec.core.prefix_cache import PrefixCache

disable_created_metrics()  # no ``*_created`` series: the counters start with the server


class ServerMetrics:
    """The server's metrics.

    Args:
        waiting: returns the number of requests in the queue.
        running: returns 1 while a request is being generated, else 0.
        prefix_cache: the engine's kept prompt prefixes, or None: their size and restores are reported
            (``localspec_prompt_cache_*``).
        memory: the draft memories (:class:`~localspec.core.drafters.DraftMemories`), or None: the bytes and
            tokens they hold over every scope (``localspec_draft_memory_*``; no figure per scope).
    """

    def __init__(self, waiting: Callable[[], int], running: Callable[[], int],
                 prefix_cache: PrefixCache | None = None, memory=None) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("localspec_requests", "HTTP requests to the generation endpoints, by status",
                                ["endpoint", "status"], registry=r)
        self.cancelled = Counter("localspec_requests_cancelled", "generations ended because the client went away",
                                 registry=r)
        # one series per figure the statistics record declares with a metric (summed over generations,
        # or a histogram of their values)
        self.figures = [(f.name, Histogram(m.name, m.help, buckets=m.buckets, registry=r) if m.buckets
                         else Counter(m.name, m.help, registry=r))
                        for f in figures(GenerationStats) if (m := f.metric) is not None]
        self.drafts = Counter("localspec_spec_decode_num_drafts", "rounds that drafted, by drafter", ["drafter"],
                              registry=r)
        self.draft_tokens = Counter("localspec_spec_decode_num_draft_tokens", "tokens drafted, by drafter",
                                    ["drafter"], registry=r)
        self.accepted_tokens = Counter("localspec_spec_decode_num_accepted_tokens",
                                       "draft tokens the target accepted, by drafter", ["drafter"], registry=r)
        self.accepted_per_pos = Counter("localspec_spec_decode_num_accepted_tokens_per_pos",
                                        "accepted draft tokens by position in the draft (0 = first)",
                                        ["drafter", "position"], registry=r)
        Gauge("localspec_requests_deferred", "requests waiting in the queue", registry=r).set_function(waiting)
        Gauge("localspec_requests_processing", "requests being generated (0 or 1)",
              registry=r).set_function(running)
        if prefix_cache is not None:
            r.register(_PrefixCacheCollector(prefix_cache))
        if memory is not None:
            Gauge("localspec_draft_memory_bytes", "bytes the draft memory holds (every scope's texts and their "
                  "index, --draft-memory-tokens)", registry=r).set_function(lambda: memory.nbytes)
            Gauge("localspec_draft_memory_tokens", "tokens the draft memory holds (every scope)",
                  registry=r).set_function(lambda: memory.tokens)

    def observe(self, gen: Generation) -> None:
        """Count one finished (or cancelled) generation."""
        s = gen.stats
        for name, series in self.figures:
            if isinstance(series, Histogram):
                series.observe(getattr(s, name))
            else:
                series.inc(getattr(s, name))
        if s.end_reason is not None and s.end_reason.value == "cancelled":
            self.cancelled.inc()
        for r in gen.rounds:
            if not r.drafted:
                continue
            self.drafts.labels(r.drafter).inc()
            self.draft_tokens.labels(r.drafter).inc(r.drafted)
            self.accepted_tokens.labels(r.drafter).inc(r.accepted)
            for i in range(r.accepted):
                self.accepted_per_pos.labels(r.drafter, str(i)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _PrefixCacheCollector:
    """The kept prompt prefixes (:class:`~localspec.core.prefix_cache.PrefixCache`), read at each scrape."""

    def __init__(self, cache: PrefixCache) -> None:
        self.cache = cache

    def collect(self):
        c = self.cache
        yield GaugeMetricFamily("localspec_prompt_cache_bytes", "bytes of the kept prompt-prefix snapshots",
                                value=c.nbytes)
        yield GaugeMetricFamily("localspec_prompt_cache_snapshots", "prompt-prefix snapshots kept (target and draft "
                                "model)", value=len(c))
        yield CounterMetricFamily("localspec_prompt_cache_restores", "snapshots restored into a model's KV cache",
                                  value=c.stats.restored)
        yield CounterMetricFamily("localspec_prompt_cache_restored_tokens", "prompt tokens the target found in a "
                                  "restored snapshot (counted in localspec_prompt_tokens_cached too)",
                                  value=c.stats.restored_tokens)
        yield CounterMetricFamily("localspec_prompt_cache_evictions", "snapshots evicted for the byte limit",
                                  value=c.stats.evicted)
        yield CounterMetricFamily("localspec_prompt_cache_store_reads", "snapshots found on disk "
                                  "(--prompt-cache-disk-mb), not in memory", value=c.stats.from_store)
        yield GaugeMetricFamily("localspec_prompt_cache_disk_bytes", "bytes of every file in the prompt "
                                "snapshots' folder on disk (--prompt-cache-disk-mb; 0: off)",
                                value=getattr(c.store, "nbytes", 0))
