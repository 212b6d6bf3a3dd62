"""What a master holds a request row in: ``python -m benchmarks.row_memory [--rows 58500]``.

Protects (issue 27, the soak's master line): a step's request rows, as a master keeps them (45-row reports off the
wire into the step's ``RowSample``, sealed blocks packed, ``RowColumns.pack``), against the same reports with every
sealed block widened to int64 columns instead (what it kept before), measured in the same run by ``tracemalloc``
(bytes a row held at the end, the open block's pending reports included), plus the cost of sealing a block and of
widening it back when the step is judged. Soak-shaped rows: ~128-token answers at 50 tokens/s, a stall now and then
(about a third of the rows carry long gaps). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
import tracemalloc

import msgpack
import numpy  # noqa: F401 (a master's: RowSample packs only where numpy is loaded)

from benchmarks.common import git_rev
from harness.metrics import row_sample
from harness.metrics.aggregate import Bucket
from harness.metrics.record import RequestRecord
from harness.metrics.row_columns import RowColumns
from harness.metrics.rows import ROW_FIELDS, encode_row

REPORT_ROWS = 45


def _record(rng: random.Random) -> RequestRecord:
    ttft, out = rng.lognormvariate(-3, 0.3), max(2, int(rng.lognormvariate(4.8, 0.5)))
    times, t = [ttft], ttft
    for _ in range(out - 1):
        t += rng.lognormvariate(0, 0.2) / 50 + (0.3 if rng.random() < 0.003 else 0.0)
        times.append(t)
    return RequestRecord(start=0.0, ttft_s=ttft, e2e_s=t, chunk_times=times, output_tokens=out,
                         prompt_tokens=int(rng.lognormvariate(5.5, 0.5)), new_connection=rng.random() < 0.01,
                         in_flight=rng.randint(20, 24))


def _reports(rows: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    pool = [_record(rng) for _ in range(300)]
    out, t = [], 0.0
    for r in range(rows // REPORT_ROWS):
        rc = RowColumns()
        for k in range(REPORT_ROWS):
            t += 0.06
            rc.append(encode_row(pool[(r * REPORT_ROWS + k) % len(pool)], t, r % 2))
        out.append(msgpack.packb(rc.wire(), use_bin_type=True))
    return out


def _held(reports: list[bytes], seal) -> tuple[float, int]:
    """Bytes a row the step's rows hold once every report is in, with ``seal`` as the sealed blocks' treatment."""
    saved, row_sample._seal = row_sample._seal, seal
    try:
        gc.collect()
        tracemalloc.start()
        bucket = Bucket()
        for wire in reports:
            bucket.add_rows(RowColumns.from_wire(msgpack.unpackb(wire, raw=False)), REPORT_ROWS, take=True)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return held / len(bucket.rows), len(bucket.rows)
    finally:
        row_sample._seal = saved


def _ms(f, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=58_500, help="rows in the step (the soak's hour: ~58,500)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    reports = _reports(args.rows, args.seed)
    packed, n = _held(reports, lambda rows: rows.pack())
    widened, _ = _held(reports, lambda rows: rows.settle())
    block = reports[:row_sample.BLOCK_ROWS // REPORT_ROWS]

    def gathered() -> RowColumns:
        out = RowColumns()
        for wire in block:
            out.extend(RowColumns.from_wire(msgpack.unpackb(wire, raw=False)))
        return out

    def pack_then_widen() -> None:
        rows = gathered()
        rows.pack()
        rows.settle()

    gather_ms = _ms(gathered)
    gaps = gathered().cols[ROW_FIELDS.index("gaps")]
    print(json.dumps({
        "bench": "row_memory", "rev": git_rev(), "rows": n,
        "gapped_share": round(sum(1 for g in gaps if g) / len(gaps), 3),
        "bytes_per_row_packed": round(packed, 1), "bytes_per_row_int64": round(widened, 1),
        "ratio_packed_vs_int64": round(packed / widened, 3),
        "block_rows": len(block) * REPORT_ROWS, "gather_ms": gather_ms,
        "seal_pack_ms": round(_ms(lambda: gathered().pack()) - gather_ms, 3),
        "seal_widen_ms": round(_ms(lambda: gathered().settle()) - gather_ms, 3),
        "pack_then_widen_ms": round(_ms(pack_then_widen) - gather_ms, 3),
    }))


if __name__ == "__main__":
    main()
