"""``python -m bench [scenario ...] [--peers] [--repeat N] [--markdown FILE] [--json FILE] [--docs] [--plots DIR]``

Runs the named scenarios (default: all of ``bench.scenarios.DEFAULT``) against oncelog and,
with ``--peers``, against Tansu (in memory) and librdkafka's mock cluster in the same run. Each
system is started once; within each repetition every case runs on every system in turn (the
first system rotates with the repetition). Reported: the median over repetitions and the spread
(min–max), the broker's peak RSS and its CPU time per scenario (psutil). A failed measurement is
reported as such (its error in the log) and does not stop the others.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import psutil

from bench import report
from bench.common import RssSampler, sampler_for
from bench.scenarios import CLUSTER, CLUSTER_SYSTEMS, CREATED, DEFAULT, SCENARIOS, Options
from bench.systems import SYSTEMS, make_work_dir, remove_work_dir


#: A system whose RSS passed this is restarted (fresh, empty) before its next case. The peers
#: keep every record in memory and never free it (Tansu reached 6 GB and was killed by the
#: kernel in a 1M-records-per-run suite); restarting them keeps the machine out of swap-less
#: memory pressure, which would distort every system's figures.
RESTART_RSS_BYTES = 2_000_000_000


def _healthy(sampler) -> bool:  # type: ignore[no-untyped-def]
    try:
        if sampler.proc.status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return sampler.sample() < RESTART_RSS_BYTES


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", default=None, help=f"of {', '.join(SCENARIOS)}")
    ap.add_argument("--peers", action="store_true", help="also run Tansu and librdkafka's mock cluster")
    ap.add_argument("--cluster", action="store_true",
                    help="cluster mode (issue 15): oncelog embedded, oncelog-cluster1, oncelog-cluster3 and "
                         f"tansu-pg on one PostgreSQL; default scenarios {' '.join(CLUSTER)}")
    ap.add_argument("--cluster-failover", action="store_true",
                    help="SIGKILL of a partition leader under a producer, repeated (bench.cluster_failover)")
    ap.add_argument("--txn-failover", action="store_true",
                    help="SIGKILL of a transactional id's coordinator under back-to-back commits, repeated "
                    "(bench.txn_failover)")
    ap.add_argument("--cluster-load", action="store_true",
                    help="PostgreSQL commits/s, WAL bytes/s, connections and CPU under produce (bench.cluster_load)")
    ap.add_argument("--cluster-scale", action="store_true",
                    help="issue 28: B brokers on one PostgreSQL and an embedded broker under producers, "
                         "transactions and consumers at once (bench.cluster_scale)")
    ap.add_argument("--security", action="store_true",
                    help="issue 18: produce/consume over SASL_SSL vs PLAINTEXT and SCRAM connection set-up (bench.security)")
    ap.add_argument("--baseline", type=Path, metavar="DIR",
                    help="also run oncelog from this source tree (e.g. a worktree of an earlier commit)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--records", type=int, default=Options.records)
    ap.add_argument("--seconds", type=float, default=Options.seconds)
    ap.add_argument("--footprint-bytes", type=int, default=Options.footprint_bytes,
                    help="bytes the footprint scenario writes (default 5 GB)")
    ap.add_argument("--markdown", type=Path, help="write the results as Markdown here")
    ap.add_argument("--json", type=Path, help="write every measured value (all repetitions) as JSON here")
    ap.add_argument("--docs", action="store_true",
                    help="replace the '## Side by side with peers' results in docs/PERFORMANCE.md")
    ap.add_argument("--plots", type=Path, help="write PNG plots here (matplotlib)")
    argv = sys.argv[1:] if argv is None else list(argv)
    for flag, module in (("--cluster-failover", "cluster_failover"), ("--cluster-load", "cluster_load"),
                         ("--cluster-scale", "cluster_scale"),
                         ("--txn-failover", "txn_failover"), ("--security", "security")):
        if flag in argv:  # the rest of the command line is that module's own
            import importlib

            return importlib.import_module(f"bench.{module}").main([a for a in argv if a != flag])
    args = ap.parse_args(argv)
    if not args.scenarios:
        args.scenarios = CLUSTER if args.cluster else DEFAULT
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    opts = Options(records=args.records, seconds=args.seconds, footprint_bytes=args.footprint_bytes)
    names = ["oncelog", "tansu", "mock"] if args.peers else ["oncelog"]
    if args.cluster:
        names = list(CLUSTER_SYSTEMS)
    if args.baseline is not None:
        names.insert(1, "baseline")
    work = make_work_dir()
    systems = []
    samplers = {}
    # values[(scenario, metric)][system] -> list; resources[scenario][system] -> [(rss, cpu)]
    values: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    resources: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    failures: list[str] = []
    restarts: dict[str, int] = defaultdict(int)
    load_before = psutil.getloadavg()
    started = time.time()
    try:
        for name in list(names):
            s = SYSTEMS[name](work, args.baseline) if name == "baseline" else SYSTEMS[name](work)
            try:
                s.start()
            except Exception as e:  # noqa: BLE001 - a system that cannot start is reported, the others run
                failures.append(f"{name} did not start: {type(e).__name__}: {e}")
                print(f"# {name} did not start: {e}", file=sys.stderr, flush=True)
                names.remove(name)
                continue
            systems.append(s)
            samplers[name] = sampler_for(s)
            print(f"# {name} on {s.bootstrap} (pid {s.pid})", file=sys.stderr, flush=True)
        for scenario in args.scenarios:
            cases = SCENARIOS[scenario](opts)
            for rep in range(args.repeat):
                order = systems[rep % len(systems):] + systems[:rep % len(systems)]
                for case in cases:
                    for s in order:
                        if case.systems is not None and s.name not in case.systems:
                            continue
                        sm = samplers[s.name]
                        if not _healthy(sm):
                            print(f"# restarting {s.name}: RSS {sm.sample() / 1e6:,.0f} MB or not running",
                                  file=sys.stderr, flush=True)
                            restarts[s.name] += 1
                            sm.stop()
                            try:
                                s.stop()
                            except Exception:  # noqa: BLE001 - it may be dead already
                                traceback.print_exc()
                            s.start()
                            sm = samplers[s.name] = sampler_for(s)
                        sm.reset()
                        cpu0 = sm.cpu()
                        try:
                            got = case.run(s)
                        except Exception as e:  # noqa: BLE001 - reported, the suite goes on
                            failures.append(f"{scenario} / {case.name} / {s.name}: {type(e).__name__}: {e}")
                            traceback.print_exc()
                            continue
                        finally:
                            s.delete_topics(list(CREATED))
                            CREATED.clear()
                        resources[scenario][s.name].append((sm.peak(), sm.cpu() - cpu0))
                        got = got if isinstance(got, dict) else {case.name: got}
                        for metric, v in got.items():
                            values[(scenario, metric)][s.name].append(v)
                        shown = ", ".join(f"{k}={v:,.1f}" for k, v in got.items())
                        rss, cpu = resources[scenario][s.name][-1]
                        print(f"rep {rep} {scenario:12s} {s.name:8s} {shown} [RSS {rss / 1e6:.0f} MB, CPU {cpu:.2f} s]",
                              file=sys.stderr, flush=True)
    finally:
        for sm in samplers.values():
            sm.stop()
        for s in systems:
            try:
                s.stop()
            except Exception:  # noqa: BLE001
                traceback.print_exc()
        remove_work_dir(work)
    header = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} by `python -m bench "
        f"{' '.join(args.scenarios)}{' --peers' if args.peers else ''}{' --cluster' if args.cluster else ''}"
        f"{f' --baseline {args.baseline}' if args.baseline else ''} --repeat {args.repeat}`: "
        f"{platform.machine()}, {psutil.cpu_count()} cores shared by the brokers and the clients, "
        f"Python {platform.python_version()}; load average (1 min) {load_before[0]:.1f} before, "
        f"{psutil.getloadavg()[0]:.1f} after. {opts.records:,} records per 100 B produce run "
        f"({opts.records // 2:,} at 1 KiB), timed runs {opts.seconds:g} s; median of {args.repeat} "
        f"(min–max in brackets)."
    )
    if restarts:
        header += " Restarted (RSS over 2 GB or dead): " + ", ".join(f"{n} {k}×" for n, k in restarts.items()) + "."
    text = report.markdown(header, names, values, resources, failures)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        import json

        args.json.write_text(json.dumps({
            "header": header,
            "values": [{"scenario": sc, "measurement": m, "system": n, "runs": vs}
                       for (sc, m), by in values.items() for n, vs in by.items()],
            "resources": [{"scenario": sc, "system": n, "rss_bytes_cpu_s": rs}
                          for sc, by in resources.items() for n, rs in by.items()],
            "failures": failures,
        }, indent=1))
    if args.plots:
        report.plots(args.plots, names, values)
    if args.docs:
        report.write_docs(Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md", text, args.plots)
    return 1 if failures and not values else 0


if __name__ == "__main__":
    sys.exit(main())
