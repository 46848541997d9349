"""Open-loop load on loopback: prober beside a plain-asyncio reference on the same Poisson schedule.

    python bench/open_loop.py                  # 200, 500 and 800 requests/s, about 2 minutes
    python bench/open_loop.py --rates 200 --duration 3 --repeat 1

The fixed-delay SSE server of ttft_overhead.py (first content 100 ms after the request, 19 more
chunks 20 ms apart) serves, in turn, the reference client (plain asyncio, imports nothing of
prober; bench/reference_client.py) and prober's client (the latency probe's Poisson level ->
TargetSession.open_loop -> the OpenAI adapter -> prober.targets.transport, every sample checked and stored;
bench/prober_client.py). Both follow the schedule prober/probes/load.py draws for the level, so they send
the same requests at the same offsets. Peers (guidellm, aiperf) run at the same rates where they are
installed (--guidellm / --aiperf or $PROBER_BENCH_GUIDELLM / $PROBER_BENCH_AIPERF: the path of their
console script, installed in a virtual environment of their own, never prober's).

Per rate and client: send lag (the time just before the request was written minus when it was
due), TTFT overhead (measured TTFT - 100 ms) and the achieved rate (requests over the span of
their actual send times; the schedule's own rate beside it). Targets (issue 13): prober's send-lag
p99 at most 2 ms at every rate up to 800/s, its TTFT overhead p99 within 1.5x the reference's, its
achieved rate at least 99% of the schedule's. Exit status 1 when one is missed. The host's speed is
gauged between phases as in ttft_overhead.py. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[1:1] = [str(BENCH.parent)]        # prober from this checkout, installed or not

import machine  # noqa: E402
import peers  # noqa: E402
import sse_server  # noqa: E402
from ttft_overhead import (  # noqa: E402
    FIRST_DELAY_MS,
    QUIET_SHARE,
    Child,
    _fmt,
    start_processes,
)

DEFAULT_RATES = (200.0, 500.0, 800.0)
SEND_LAG_P99_TARGET_MS = 2.0
P99_RATIO_TARGET = 1.5
ACHIEVED_SHARE_TARGET = 0.99
REFERENCE = "reference"
PROBER = "prober"
MAX_IN_FLIGHT = 2048      # prober's connection cap: well above rate x 0.5 s, so it never holds a request back


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in DEFAULT_RATES),
                        help="Poisson rates in requests/s (default %(default)s)")
    parser.add_argument("--duration", type=float, default=4.0,
                        help="seconds of arrivals per rate and client (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=1, help="passes, pooled (default %(default)s)")
    parser.add_argument("--seed", type=int, default=13, help="seed of the schedules (default %(default)s)")
    parser.add_argument("--wait-quiet", type=float, default=15.0, metavar="SECONDS",
                        help="before each rate, wait up to this long for a quiet machine (0: never)")
    machine.add_steady_arguments(parser, "rate", "a rate (reference and prober)")
    parser.add_argument("--json", default=None, help="also write every phase's raw results to this file")
    parser.add_argument("--guidellm", default=os.environ.get("PROBER_BENCH_GUIDELLM"),
                        help="guidellm's console script (default $PROBER_BENCH_GUIDELLM)")
    parser.add_argument("--aiperf", default=os.environ.get("PROBER_BENCH_AIPERF"),
                        help="aiperf's console script (default $PROBER_BENCH_AIPERF)")
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",")]
    if min(args.rates) <= 0 or args.duration <= 0 or args.repeat < 1:
        parser.error("rates and --duration must be positive, --repeat at least 1")
    machine.check_steady_arguments(parser, args)
    return args


def level_offsets(rate: float, count: int, seed: int) -> list[float]:
    """The schedule prober's latency probe draws for this Poisson level (prober/probes/load.py)."""
    from prober.probes.latency import LatencyParams
    from prober.probes.load import level_schedule

    params = LatencyParams(arrival="poisson", rates=[rate], requests_per_level=count, warmup=0, seed=seed)
    return level_schedule(params, "poisson", rate, "measure")


def achieved_rate(sent_ns: list[int]) -> float | None:
    if len(sent_ns) < 2 or sent_ns[-1] <= sent_ns[0]:
        return None
    return (len(sent_ns) - 1) / ((sent_ns[-1] - sent_ns[0]) / 1e9)


def peer_tokenizer(args: argparse.Namespace, scratch: Path) -> Path | None:
    """The local tokenizer the peers load instead of downloading one, built once per run with the
    first installed peer's interpreter (bench/peers.py); None if no peer is installed or it failed."""
    for script in (args.guidellm, args.aiperf):
        if peers.available(script):
            directory = scratch / "tokenizer"
            problem = peers.build_tokenizer(script, directory)
            if problem is None:
                return directory
            print(f"peers: {problem}", file=sys.stderr, flush=True)
            return None
    return None


def run(args: argparse.Namespace, db_url: str, scratch: Path, discarded: list[dict]) -> list[dict]:
    tokenizer = peer_tokenizer(args, scratch)
    children: list[Child] = []
    gauge = machine.WorkGauge().start()
    try:
        server, reference, tested, base_url = start_processes(db_url, MAX_IN_FLIGHT, children)
        reference.ask({"concurrency": 16, "count": 64})                          # warm-up, not reported
        tested.ask({"concurrency": 16, "count": 64, "conformance": True})
        server.ask("stats")
        pids = [os.getpid()] + [child.process.pid for child in children]
        phases = []
        host = machine.HostSpeed(gauge)
        host.probe()
        for rep in range(args.repeat):
            for index, rate in enumerate(args.rates):
                count = max(2, round(rate * args.duration))
                offsets = level_offsets(rate, count, args.seed + rep)
                clients = [REFERENCE, PROBER] if (rep + index) % 2 == 0 else [PROBER, REFERENCE]

                def run_level(stamp, rate=rate, count=count, offsets=offsets, clients=clients,
                              rep=rep) -> list[dict]:
                    if args.wait_quiet > 0:
                        machine.wait_until_quiet(pids, QUIET_SHARE, args.wait_quiet)
                    done = []
                    for client in clients:
                        child = reference if client == REFERENCE else tested
                        message = {"offsets_s": offsets} if client == REFERENCE else \
                            {"count": count, "conformance": True, "rate_rps": rate, "seed": args.seed + rep}
                        before = machine.snapshot(pids)
                        ticks = machine.tree_ticks([child.process.pid])
                        result = child.ask(message)
                        ticks = machine.tree_ticks([child.process.pid]) - ticks
                        result.update(client=client, rate=rate, count=count, rep=rep,
                                      scheduled_rate=achieved_rate([round(o * 1e9) for o in offsets]),
                                      cpu_s=machine.ticks_to_seconds(ticks) if ticks > 0 else result["cpu_s"],
                                      other_cpu=machine.other_share(before, machine.snapshot(pids)),
                                      server=server.ask("stats"))
                        stamp(result)
                        done.append(result)
                        print(f"pass {rep + 1}/{args.repeat}  {rate:>5g}/s  {client:<10} {count:>5} requests in "
                              f"{result['wall_s']:6.2f}s, {len(result['errors'])} errors", file=sys.stderr,
                              flush=True)
                    return done

                kept, dropped = host.run_level(run_level, f"pass {rep + 1}/{args.repeat}  {rate:g}/s",
                                               tolerance=machine.STEADY_TOLERANCE, retries=args.steady_retries,
                                               max_wait=args.wait_steady)
                phases += kept
                discarded += dropped
                for name, script in (("guidellm", args.guidellm), ("aiperf", args.aiperf)):
                    if args.wait_quiet > 0 and peers.available(script):
                        machine.wait_until_quiet(pids, QUIET_SHARE, args.wait_quiet)
                    before = machine.snapshot(pids)
                    host_before = host.probe()
                    started = time.monotonic()
                    result = peers.run_peer(name, script, base_url, rate, count, sse_server.MODEL, tokenizer)
                    phases.append({**result, "client": name, "rate": rate, "count": count, "rep": rep,
                                   "other_cpu": machine.other_share(before, machine.snapshot(pids)),
                                   "server": server.ask("stats"), "host_before_ms": host_before,
                                   "host_inphase_ms": host.inphase_since(started),
                                   "host_after_ms": host.probe()})
                    if "unavailable" not in result:
                        print(f"pass {rep + 1}/{args.repeat}  {rate:>5g}/s  {name:<10} {count:>5} requests, "
                              f"{len(result['errors'])} errors", file=sys.stderr, flush=True)
        machine.mark_slowdowns(phases + discarded, host)
        return phases
    finally:
        gauge.stop()
        for child in reversed(children):
            child.stop()


def summarize(args: argparse.Namespace, phases: list[dict]) -> list[dict]:
    from prober.core.stats import percentile

    rows = []
    for rate in args.rates:
        by_client: dict[str, dict] = {}
        for client in (REFERENCE, PROBER, "guidellm", "aiperf"):
            mine = [p for p in phases if p["client"] == client and p["rate"] == rate]
            if not mine:
                continue
            if any(p.get("unavailable") for p in mine):
                by_client[client] = {"rate": rate, "client": client, "note": mine[0]["unavailable"]}
                continue
            overhead = [t - FIRST_DELAY_MS for p in mine for t in p["ttft_ms"]]
            lags = [lag for p in mine for lag in p.get("send_lag_ms") or []]
            rates = [r for p in mine if (r := achieved_rate(p.get("sent_ns") or [])) is not None]
            scheduled = [p["scheduled_rate"] for p in mine if p.get("scheduled_rate")]
            n = sum(p["count"] for p in mine)
            cpu_known = all(p.get("cpu_s") is not None for p in mine)
            by_client[client] = {
                "rate": rate, "client": client, "n": n, "errors": sum(len(p["errors"]) for p in mine),
                "lag_p50": percentile(lags, 50), "lag_p99": percentile(lags, 99),
                "p50": percentile(overhead, 50), "p99": percentile(overhead, 99),
                "achieved": min(rates) if rates else mine[0].get("achieved_rps"),
                "scheduled": min(scheduled) if scheduled else None,
                "cpu_ms": 1e3 * sum(p["cpu_s"] for p in mine) / n if cpu_known else None,
                "loop_lag_p99": max((p.get("loop_lag_p99_ms") or 0.0 for p in mine), default=None)
                if client == PROBER else None,
                "stored_ok": all(p["stored"] == p["count"] for p in mine) if client == PROBER else None,
                "server_late_p99": max(((p.get("server") or {}).get("first_late_p99_ms") or 0.0) for p in mine),
                "other_cpu": max((p["other_cpu"] for p in mine if p.get("other_cpu") is not None), default=None),
                "host_slowdown": max((p["host_slowdown"] for p in mine), default=None),
                "first_errors": [e for p in mine for e in p["errors"]][:3],
            }
        ref = by_client.get(REFERENCE)
        for row in by_client.values():
            row["ratio"] = (row["p99"] / ref["p99"] if ref and row.get("p99") is not None and ref.get("p99")
                            and row["client"] != REFERENCE else None)
            if row.get("achieved") and row.get("scheduled"):
                row["share"] = row["achieved"] / row["scheduled"]
            elif row.get("achieved"):
                row["share"] = row["achieved"] / rate
        rows += list(by_client.values())
    return rows


def print_table(rows: list[dict]) -> None:
    header = ["rate/s", "client", "requests", "errors", "send lag p50 ms", "send lag p99 ms",
              "TTFT overhead p50 ms", "p99 ms", "p99 / ref", "achieved/s", "of schedule", "client CPU ms/req",
              "client loop lag p99 ms", "server late p99 ms", "other CPU %", "host slowdown"]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for r in rows:
        if "note" in r:
            print(f"| {r['rate']:g} | {r['client']} | {r['note']} |" + " |" * (len(header) - 3))
            continue
        share = r.get("share")
        cells = [f"{r['rate']:g}", r["client"], str(r["n"]), str(r["errors"]), _fmt(r["lag_p50"], 2),
                 _fmt(r["lag_p99"], 2), _fmt(r["p50"]), _fmt(r["p99"]), _fmt(r["ratio"], 2), _fmt(r["achieved"], 0),
                 "-" if share is None else f"{100 * share:.1f}%", _fmt(r["cpu_ms"], 2), _fmt(r["loop_lag_p99"]),
                 _fmt(r["server_late_p99"]), _fmt(None if r["other_cpu"] is None else 100 * r["other_cpu"], 0),
                 _fmt(r["host_slowdown"], 2)]
        print("| " + " | ".join(cells) + " |")


def judge(rows: list[dict]) -> list[tuple[str, bool]]:
    verdicts = []
    for r in rows:
        if r["client"] != PROBER:
            continue
        rate = f"{r['rate']:g}/s"
        verdicts.append((f"send lag p99 at {rate}: {_fmt(r['lag_p99'], 2)} ms (target <= {SEND_LAG_P99_TARGET_MS:g})",
                         r["lag_p99"] is not None and r["lag_p99"] <= SEND_LAG_P99_TARGET_MS))
        verdicts.append((f"TTFT overhead p99 at {rate}: {_fmt(r['p99'])} ms = {_fmt(r['ratio'], 2)}x the reference's "
                         f"(target <= {P99_RATIO_TARGET}x)", r["ratio"] is not None and r["ratio"] <= P99_RATIO_TARGET))
        share = r.get("share")
        verdicts.append((f"achieved rate at {rate}: {_fmt(r['achieved'], 0)}/s = "
                         f"{'-' if share is None else f'{100 * share:.1f}%'} of the schedule's, every sample "
                         f"{'stored' if r['stored_ok'] else 'NOT stored'} (target >= {ACHIEVED_SHARE_TARGET:.0%})",
                         share is not None and share >= ACHIEVED_SHARE_TARGET and bool(r["stored_ok"])
                         and not r["errors"]))
    return verdicts


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine.raise_fd_limit()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="prober-open-loop-") as tmp:
        discarded: list[dict] = []
        phases = run(args, f"sqlite:///{tmp}/bench.db", Path(tmp), discarded)
    rows = summarize(args, phases)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "phases": phases, "rows": rows,
                                               "discarded": discarded}, indent=1, default=str))
    from prober.run import event_loop

    print(f"\nOpen loop on loopback (Poisson; true TTFT {FIRST_DELAY_MS:g} ms, overhead = measured - "
          f"{FIRST_DELAY_MS:g} ms); {args.repeat} pass(es), {args.duration:g} s per rate; prober on "
          f"{event_loop.chosen()}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; "
          f"{time.monotonic() - started:.0f}s\n")
    print_table(rows)
    disturbed = [r for r in rows if (r.get("other_cpu") or 0) > QUIET_SHARE]
    if disturbed:
        print(f"\nnote: other processes used more than {QUIET_SHARE:.0%} of the CPU during {len(disturbed)} of "
              f"{len(rows)} rows (column 'other CPU %'): absolute figures are disturbed; compare with the "
              f"reference of the same rate")
    for note in machine.host_notes(rows, discarded, machine.STEADY_TOLERANCE,
                                   "printed above; with --json, kept under 'discarded'"):
        print(f"\nnote: {note}")
    print()
    verdicts = judge(rows)
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    failed = sum(1 for _, ok in verdicts if not ok)
    worst_ratio = max((r["ratio"] for r in rows if r["client"] == PROBER and r["ratio"] is not None), default=None)
    worst_lag = max((r["lag_p99"] for r in rows if r["client"] == PROBER and r["lag_p99"] is not None), default=None)
    print(f"\nopen loop: {'PASS' if not failed else 'FAIL'} ({len(verdicts) - failed}/{len(verdicts)} targets): "
          f"prober send-lag p99 at most {_fmt(worst_lag, 2)} ms, TTFT overhead p99 at most "
          f"{_fmt(worst_ratio, 2)}x the reference's, at {', '.join(f'{r:g}' for r in args.rates)}/s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
