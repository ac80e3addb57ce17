"""The relay that hands the engine thread's messages to the event loops (:class:`LoopRelay`): in order,
from any thread, and a job whose event loop is gone is cancelled rather than raising in the relay."""

import asyncio
import threading

from localspec.config import SamplingParams
from localspec.server.bodies import parse_request
from localspec.server.worker import Job, LoopRelay


def _job(loop):
    return Job(parse_request({"prompt": "t", "max_tokens": 2}, "completion"), SamplingParams(), loop)


def test_messages_arrive_in_the_order_posted_from_another_thread():
    relay = LoopRelay()
    loop = asyncio.new_event_loop()
    try:
        job = _job(loop)
        sender = threading.Thread(target=lambda: [relay.put(job, i) for i in range(500)])
        sender.start()

        async def receive():
            return [await asyncio.wait_for(job.out.get(), 5) for _ in range(500)]

        got = loop.run_until_complete(receive())
        sender.join()
        assert got == list(range(500))
    finally:
        loop.close()


def test_a_job_whose_loop_is_closed_is_cancelled_and_the_relay_goes_on():
    relay = LoopRelay()
    closed = asyncio.new_event_loop()
    closed.close()
    gone = _job(closed)
    relay.put(gone, "lost")
    loop = asyncio.new_event_loop()
    try:
        live = _job(loop)
        relay.put(live, "next")
        assert loop.run_until_complete(asyncio.wait_for(live.out.get(), 5)) == "next"
        assert gone.cancelled and not live.cancelled
    finally:
        loop.close()
