"""A bucket that has every sketch, counter and optional wire key: its msgpack bytes stay the same (golden).

``test_protocol.py`` keeps the first landing's bytes of a plain bucket; this one covers what came later — open
loop, exact per-chunk counts, reasoning, tool calls, embeddings inputs, the prefix cache (usage and llama.cpp's
timings), sessions, failure details, request rows — so that reshaping ``Bucket`` cannot change a byte on the wire.
"""

from __future__ import annotations

import msgpack

from harness.metrics.aggregate import Bucket, Recorder
from harness.metrics.record import RequestRecord
from harness.metrics.sessions import SessionRecord

# msgpack.packb(bucket().to_wire()), written by the code before the metric registry (harness/metrics/vocabulary.py);
# rewritten on purpose when rows grew ``gaps``, then ``send`` and ``lag`` (older rows are still read: test_rows.py), and
# when a cancelled request joined the bucket (``cxl``, ``cxlt``; its TTFT and headers in their sketches).
GOLDEN_FULL_BUCKET = bytes.fromhex(
    "de0014a2736bde0014a873656e645f6c61678aa17601a5616c706861cb3f847ae147ae147ba16e03a373756dcb3fe051eb851eb852a36d"
    "696ecb0000000000000000a36d6178cb3fe0000000000000a47a65726f01a86f766572666c6f7700a46b65797392d1ff1accc4a6636f75"
    "6e7473920101a4747466748aa17601a5616c706861cb3f847ae147ae147ba16e06a373756dcb3fd999999999999aa36d696ecb3fa99999"
    "9999999aa36d6178cb3fb70a3d70a3d70aa47a65726f00a86f766572666c6f7700a46b65797395d1ff6b09080606a6636f756e74739502"
    "01010101ad747466745f696e74656e6465648aa17601a5616c706861cb3f847ae147ae147ba16e02a373756dcb3fbeb851eb851eb9a36d"
    "696ecb3faeb851eb851eb8a36d6178cb3faeb851eb851ebaa47a65726f00a86f766572666c6f7700a46b65797391d1ff74a6636f756e74"
    "739102a36532658aa17601a5616c706861cb3f847ae147ae147ba16e05a373756dcb4000cccccccccccca36d696ecb3fa999999999999a"
    "a36d6178cb3feccccccccccccda47a65726f00a86f766572666c6f7700a46b65797395d1ff6b50180b1da6636f756e7473950101010101"
    "ac6532655f696e74656e6465648aa17601a5616c706861cb3f847ae147ae147ba16e02a373756dcb3fe51eb851eb851fa36d696ecb3fd0"
    "a3d70a3d70a4a36d6178cb3fd999999999999aa47a65726f00a86f766572666c6f7700a46b65797392d0bd16a6636f756e7473920101a7"
    "686561646572738aa17601a5616c706861cb3f847ae147ae147ba16e02a373756dcb3f9eb851eb851eb8a36d696ecb3f847ae147ae147b"
    "a36d6178cb3f947ae147ae147ba47a65726f00a86f766572666c6f7700a46b65797392d1ff1a23a6636f756e7473920101a474706f748a"
    "a17601a5616c706861cb3f847ae147ae147ba16e05a373756dcb3fd5dd3efdd3efdea36d696ecb0000000000000000a36d6178cb3fbd03"
    "69d0369d04a47a65726f01a86f766572666c6f7700a46b65797394d1ff6e110e07a6636f756e74739401010101ac746f6b656e735f7065"
    "725f738aa17601a5616c706861cb3f847ae147ae147ba16e04a373756dcb40496be15a4f6b71a36d696ecb4021a5a5a5a5a5a5a36d6178"
    "cb40329aca6b29aca7a47a65726f00a86f766572666c6f7700a46b657973946d070e11a6636f756e74739401010101a369746c8aa17601"
    "a5616c706861cb3f847ae147ae147ba16e0aa373756dcb3ffca3d70a3d70a4a36d696ecb3fb9999999999998a36d6178cb3fdae147ae14"
    "7ae1a47a65726f00a86f766572666c6f7700a46b65797395d08d0d041225a6636f756e7473950301010401a969746c5f746f6b656e8aa1"
    "7601a5616c706861cb3f847ae147ae147ba16e05a373756dcb3fd5c28f5c28f5c3a36d696ecb3fa7e4b17e4b17e5a36d6178cb3fb99999"
    "9999999aa47a65726f00a86f766572666c6f7700a46b65797392d1ff6726a6636f756e7473920302b0746f6b656e735f7065725f636875"
    "6e6b8aa17601a5616c706861cb3f847ae147ae147ba16e03a373756dcb4018000000000000a36d696ecb3ff0000000000000a36d6178cb"
    "4008000000000000a47a65726f00a86f766572666c6f7700a46b65797393002314a6636f756e747393010101ad74746674407475726e3a"
    "322d348aa17601a5616c706861cb3f847ae147ae147ba16e01a373756dcb3fb47ae147ae147ba36d696ecb3fb47ae147ae147ba36d6178"
    "cb3fb47ae147ae147ba47a65726f00a86f766572666c6f7700a46b65797391d082a6636f756e74739101a47474666f8aa17601a5616c70"
    "6861cb3f847ae147ae147ba16e01a373756dcb3fe0000000000000a36d696ecb3fe0000000000000a36d6178cb3fe0000000000000a47a"
    "65726f00a86f766572666c6f7700a46b65797391d0dea6636f756e74739101ac74706f745f636f6e74656e748aa17601a5616c706861cb"
    "3f847ae147ae147ba16e01a373756dcb3fb1111111111111a36d696ecb3fb1111111111111a36d6178cb3fb1111111111111a47a65726f"
    "00a86f766572666c6f7700a46b65797391d1ff79a6636f756e74739101ae726561736f6e696e675f74696d658aa17601a5616c706861cb"
    "3f847ae147ae147ba16e01a373756dcb3fdae147ae147ae1a36d696ecb3fdae147ae147ae1a36d6178cb3fdae147ae147ae1a47a65726f"
    "00a86f766572666c6f7700a46b65797391d0d5a6636f756e74739101a9746f6f6c5f63616c6c8aa17601a5616c706861cb3f847ae147ae"
    "147ba16e01a373756dcb3fe6666666666666a36d696ecb3fe6666666666666a36d6178cb3fe6666666666666a47a65726f00a86f766572"
    "666c6f7700a46b65797391efa6636f756e74739101b073657373696f6e5f6475726174696f6e8aa17601a5616c706861cb3f847ae147ae"
    "147ba16e02a373756dcb4027000000000000a36d696ecb4000000000000000a36d6178cb4023000000000000a47a65726f00a86f766572"
    "666c6f7700a46b65797392234ea6636f756e7473920101b273657373696f6e5f6d6f64656c5f74696d658aa17601a5616c706861cb3f84"
    "7ae147ae147ba16e02a373756dcb4010000000000000a36d696ecb3ff0000000000000a36d6178cb4008000000000000a47a65726f00a8"
    "6f766572666c6f7700a46b657973920037a6636f756e7473920101af73657373696f6e5f636f6e746578748aa17601a5616c706861cb3f"
    "847ae147ae147ba16e02a373756dcb408f400000000000a36d696ecb4059000000000000a36d6178cb408c200000000000a47a65726f00"
    "a86f766572666c6f7700a46b65797392cce76ea6636f756e7473920101ac73657373696f6e5f747466748aa17601a5616c706861cb3f84"
    "7ae147ae147ba16e01a373756dcb3fb47ae147ae147ba36d696ecb3fb47ae147ae147ba36d6178cb3fb47ae147ae147ba47a65726f00a8"
    "6f766572666c6f7700a46b65797391d082a6636f756e74739101a16e06a26f6b05a4676f6f6403a46661696c81a5726573657401a36f75"
    "741ea2696ecd01c2a7636f756e74656400a470657272cb3fb745d1745d1746a2706e01a361727202a464726f7001a377687981a5726573"
    "6574b8636f6e6e656374696f6e2072657365742062792070656572a563616368659403cd01c2cd012201a47365737383a57475726e7382"
    "a3322d3495010101cd012cccc8a131950100000000a364656392cb3fea3d70a3d70a3e0ba3656e6496020100040500a17885ac65786163"
    "745f6368756e6b7302b169746c5f746f6b656e5f756e6b6e6f776e02a6696e7075747303b1726561736f6e696e675f636f756e74656401"
    "b8636f6e74696e756f75735f75736167655f7265667573656401a4636f6e6e02a363786c81a663616e63656c01a463786c7402a4726f77"
    "7396dc0013cd01f4cd03e8cd09c4c064032801c000c00364c0c0c0c0c0c0dc0013cd0258cd046dcd0fa0c032043200c000c003c0c0c0c0"
    "c0c0c0dc0013cd02bccd021acd1388c0c009c000c000c003c0c0c0c0c0c0c0dc0013cd0320cd02e9cd2328cd1388cd012c0cccc800c000"
    "0203c0c0c0c0c0c0c0dc0013c0c0c0c0c0c0c005c0000103c0c0c0c0c0c0c0dc0013cd01f400cd01f4c0c002c000c000c003c0c0c0c0c0"
    "c0c0"
)


def records():
    R = RequestRecord
    return [
        R(start=1.0, intended_start=0.99, ttft_s=0.05, e2e_s=0.25, headers_s=0.01, chunk_times=[0.05, 0.15, 0.25],
          output_tokens=3, prompt_tokens=100, prompt_tokens_target=110, cached_tokens=40, cached_source="usage",
          new_connection=True),
        R(start=2.0, intended_start=2.01, ttft_s=0.06, e2e_s=0.4, chunk_times=[0.06, 0.2, 0.4],
          chunk_tokens=[1, 3, 0], output_tokens=4, prompt_tokens=50, cached_tokens=50,
          cached_source="timings.cache_n"),
        R(start=3.0, ttft_s=0.07, e2e_s=0.5, chunk_times=[0.07, 0.2, 0.3, 0.5], output_tokens=9,
          output_tokens_counted=False, inputs=3),
        R(start=4.0, ttft_s=0.08, e2e_s=0.9, ttfo_s=0.5, reasoning_start_s=0.08, reasoning_tokens=5,
          reasoning_tokens_counted=True, tool_call_s=0.7, chunk_times=[0.08, 0.5, 0.7, 0.9], output_tokens=12,
          turn_bucket="2-4", session=1, turn=2, prompt_tokens=300, cached_tokens=200, cached_source="usage"),
        R(start=5.0, intended_start=4.5, error="reset", error_detail="connection reset by peer", e2e_s=0.1,
          new_connection=True, turn_bucket="1", session=2, turn=1),
        R(start=6.0, ttft_s=0.05, e2e_s=0.05, chunk_times=[0.05], chunk_tokens=[2], output_tokens=2),
        R(start=7.0, cancelled="cancel", headers_s=0.02, ttft_s=0.09, e2e_s=0.3, chunk_times=[0.09, 0.2],
          output_tokens=2, output_tokens_counted=True, new_connection=True),
    ]


def bucket():
    rec = Recorder(good=lambda r: (r.ttft_s or 0) < 0.07)
    rec.worker = 3
    rec.set_step(1, 0.0)
    for i, r in enumerate(records()):
        rec.add(r, now=1.0 + i)
    rec.note("continuous_usage_refused", 7.0)
    rec.add_session(SessionRecord(duration_s=9.5, model_time_s=3.0, turns=3, calls=4, ttft_p99_s=0.08,
                                  context_tokens=900), 8.0)
    rec.add_session(SessionRecord(duration_s=2.0, model_time_s=1.0, turns=1, calls=1, ttft_p99_s=0.2,
                                  context_tokens=100, failed=True), 8.5)
    rec.arrival(9.0, False)
    rec.arrival(9.0, True)
    (step, phase, b), = rec.drain()
    assert (step, phase) == (1, "measure")
    return b


def test_a_full_bucket_keeps_its_bytes():
    assert msgpack.packb(bucket().to_wire()) == GOLDEN_FULL_BUCKET


def test_a_full_bucket_survives_the_wire():
    back = Bucket.from_wire(msgpack.unpackb(GOLDEN_FULL_BUCKET, strict_map_key=False))
    assert msgpack.packb(back.to_wire()) == GOLDEN_FULL_BUCKET
    assert (back.requests, back.ok, back.good, back.output_tokens, back.input_tokens) == (6, 5, 3, 30, 450)
    # the cancelled request: apart from requests, its TTFT and headers kept, its E2E not, no row
    assert (back.cancelled, back.cancelled_tokens, back.new_connections) == ({"cancel": 1}, 2, 2)
    assert (back.sketches["ttft"].count, back.sketches["e2e"].count, back.sketches["headers"].count) == (6, 5, 2)
    assert back.rows_seen == 6
    assert list(back.sketches)[:3] == ["send_lag", "ttft", "ttft_intended"]  # first seen first: the wire's order
