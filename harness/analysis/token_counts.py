"""Whether the output tokens kneecap counted are the ones the server counted, per step. Pure.

Three counts of one quantity: the chunks the client received (each carries one token at least), the server's
``usage`` in its answers (what throughput and the cost use), and the server's own counter on /metrics
(``vllm:generation_tokens_total`` and its peers, as a rate over the step's measured scrapes). They disagree when
usage is rewritten or stripped on the way (a gateway, another tokenizer), or when the server serves others beside
this test, or /metrics is one replica's behind a balancer. Steady state makes the two rates comparable: requests in
flight at either end of the step's window balance out, up to one answer per request in flight (the client counts
an answer when it ends, the server token by token): beyond ``TOKEN_GAP`` plus that share (requests running at the
server over the step's successes) they are not the same traffic.
"""

from __future__ import annotations

from harness.summary import Step

__all__ = ["TOKEN_GAP", "allowed_gap", "token_gap", "token_line"]

TOKEN_GAP = 0.1
"""The server's output-token rate and the client's differing by more than this share of the larger names the step."""


def allowed_gap(st: Step) -> float:
    """``TOKEN_GAP``, plus the share of the step's answers that may straddle either end of its window."""
    running = getattr(st.server, "running_max", None)
    return TOKEN_GAP + (running / st.ok if isinstance(running, float | int) and st.ok else 0.0)


def token_gap(st: Step) -> float | None:
    """(server − client) / the larger of the two output-token rates; None when the server has no counter."""
    server = getattr(st.server, "generation_tokens_per_s", None)
    client = st.throughput.output_tokens_per_s
    if not isinstance(server, float | int) or max(server, client) <= 0:
        return None
    return (server - client) / max(server, client)


def token_line(st: Step) -> str | None:
    """The step's count disagreement in words, or None when the counts agree (or cannot be compared)."""
    out = []
    gap = token_gap(st)
    if gap is not None and abs(gap) > (limit := allowed_gap(st)):
        server = st.server.generation_tokens_per_s  # type: ignore[union-attr]  # a gap implies a Server (token_gap)
        source = "counted from chunks" if st.output_tokens_counted else "from usage"
        why = ("more than this test's: another client on this server" if gap > 0 else
               "fewer than this test's: /metrics is one replica's behind a balancer, or usage is not the server's")
        out.append(f"the server counted {server:,.0f} output tokens/s, kneecap {st.throughput.output_tokens_per_s:,.0f}"
                   f" ({source}): {abs(gap):.0%} apart (limit {limit:.0%}), the server's {why}")
    short = getattr(st.stream, "usage_below_chunks", None)
    if isinstance(short, int) and short:
        out.append(f"{short:,} answers' usage counted fewer output tokens than the chunks that streamed them: the "
                   "usage is not the stream's count (rewritten on the way, or another tokenizer)")
    return "; ".join(out) or None
