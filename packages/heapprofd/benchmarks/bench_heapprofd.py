"""heapprofd's costs, measured against references in the same run (CPU-time medians).

1. Client overhead: an allocation-heavy workload unprofiled, profiled by heapprofd at
   4096-byte sampling, and tracked by memray (every allocation), each in its own process;
   the floor is the same workload under allocator hooks that only pass calls through
   (`passthrough_hook.pyx`, built here): what any PyMem_SetAllocator hook costs.
2. Daemon CPU per 1M sampled records (Malloc + Free), at a small interval with
   block_client so that no record is lost.

3. With --callgrind, the same workloads' instruction counts under callgrind (the workload's
   alone: a run of N rounds minus a run of none), which a loaded machine does not disturb.

4. With --native ROUNDS, instead: a workload allocating through a C extension (sqlite3,
   `native_workload.py`) unprofiled, under `heap_profile --native`'s setup (the preload
   library, heaps python and libc.malloc, block_client) at 4096-byte sampling, and under
   `memray run --native`; then the daemon's CPU per native sample and the unwinding errors.
   Then the whole commands (`heap_profile --native -- python native_workload.py` with its
   daemons, `memray run --native`, each over `python native_workload.py`: CPU of the command
   and all its children), and 8 threads allocating in C (`native_threads.c`, built here) for
   --threads-seconds: operations unprofiled and under `heap_profile --native`.

    python packages/heapprofd/benchmarks/bench_heapprofd.py [--repeat N] [--rounds N]
        [--callgrind ROUNDS] [--native ROUNDS] [--threads-seconds S]
"""

from __future__ import annotations

import argparse
import os
import resource
import select
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

from heapprofd._heap_profile import trace_config, traced_command
from heapprofd._recorder import Recorder
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import report_row

HERE = Path(__file__).resolve().parent
WORKLOAD = str(HERE / "alloc_workload.py")
NATIVE_WORKLOAD = str(HERE / "native_workload.py")
TIMEOUT = 120.0
SAMPLING_INTERVAL = 4096
"""heap_profile's sampling interval (bytes), upstream's default."""
NATIVE_THREADS_MEAN_SIZE = 136
"""native_threads.c's mean allocation (its sizes run evenly from 16 to 256 bytes)."""


def _build() -> None:
    """In a checkout, builds the stale compiled modules in place."""
    build_native = HERE.parents[2] / "tools" / "build_native.py"
    if build_native.is_file():
        subprocess.run([sys.executable, str(build_native)], check=True)


def _build_passthrough(directory: str) -> None:
    """Builds the pass-through hooks into `directory` (module `passthrough_hook`)."""
    c_file = os.path.join(directory, "passthrough_hook.c")
    subprocess.run(
        [sys.executable, "-m", "cython", "-3", str(HERE / "passthrough_hook.pyx"), "-o", c_file],
        check=True,
    )
    target = os.path.join(
        directory, "passthrough_hook" + str(sysconfig.get_config_var("EXT_SUFFIX"))
    )
    cc = sysconfig.get_config_var("CC") or "gcc"
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [*cc.split(), "-O2", "-fPIC", "-shared", f"-I{include}", c_file, "-o", target], check=True
    )


def _passthrough_argv(directory: str, rounds: int) -> list[str]:
    """The workload under the pass-through hooks."""
    code = (
        f"import sys; sys.path.insert(0, {directory!r}); import passthrough_hook, runpy; "
        f"passthrough_hook.install(); sys.argv = ['w', '{rounds}']; "
        f"runpy.run_path({WORKLOAD!r}, run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def _start(argv: list[str], env: dict[str, str], notify_env: str) -> subprocess.Popen[bytes]:
    read_end, write_end = os.pipe()
    process = subprocess.Popen(
        argv,
        env={**env, notify_env: str(write_end)},
        pass_fds=(write_end,),
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], TIMEOUT)
    started = bool(ready) and os.read(read_end, 1) == b"1"
    os.close(read_end)
    if not started:
        process.kill()
        raise SystemExit(f"{argv} did not start")
    return process


def _loaded_argv(rounds: int) -> list[str]:
    """The workload in a process that imported the client (profilable, hooks idle)."""
    code = (
        "import heapprofd.client, runpy, sys; "
        f"sys.argv = ['w', '{rounds}']; runpy.run_path({WORKLOAD!r}, run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workload_cpu(argv: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    return float(next(line for line in out.splitlines() if line.startswith("CPU")).split()[1])


class Stack:
    def __init__(self, directory: str) -> None:
        self.env = dict(os.environ)
        self.env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{directory}/producer"
        self.env["PERFETTO_CONSUMER_SOCK_NAME"] = self.consumer = f"{directory}/consumer"
        self.env["PERFETTO_HEAPPROFD_SOCK_NAME"] = f"{directory}/hp"
        self.traced = _start(traced_command(), self.env, "TRACED_NOTIFY_FD")
        self.daemon = _start([sys.executable, "-m", "heapprofd"], self.env, "HEAPPROFD_NOTIFY_FD")

    def profiled(
        self,
        rounds: int,
        prefix: tuple[str, ...] = (),
        workload: str = WORKLOAD,
        env: dict[str, str] | None = None,
        **options: Any,
    ) -> tuple[float, bytes]:
        """Runs the workload under a session; returns its CPU time and the trace."""
        env = {**self.env, **(env or {}), "HEAPPROFD_WAIT_S": "120"}
        target = subprocess.Popen(
            [*prefix, sys.executable, "-m", "heapprofd", "run", "--", workload, str(rounds)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        recorder = Recorder(self.consumer)
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(target.communicate()[0]))
        reader.start()
        config = trace_config(target.pid, options.pop("interval", 4096), **options)
        # under valgrind the target seems to handle every signal: let it connect at its start
        config.data_sources[0].config.heapprofd_config.no_running = bool(prefix)
        recorder.start(config)
        reader.join(TIMEOUT)
        trace = recorder.stop()
        recorder.close()
        cpu = float(next(ln for ln in result[0].splitlines() if ln.startswith("CPU")).split()[1])
        return cpu, trace

    def close(self) -> None:
        for process in (self.daemon, self.traced):
            process.send_signal(signal.SIGTERM)
            process.wait(TIMEOUT)


def _records(trace: bytes) -> tuple[int, bool]:
    parsed: Any = parse_upstream_trace(trace)
    records, overran = 0, False
    for packet in parsed.packet:
        for dump in packet.profile_packet.process_dumps:
            overran = overran or dump.buffer_overran
            records += sum(s.alloc_count + s.free_count for s in dump.samples)
    return records, overran


def _memray_argv(out: str, rounds: int) -> list[str]:
    return [sys.executable, "-m", "memray", "run", "-f", "-q", "-o", out, WORKLOAD, str(rounds)]


def _instructions(out: str) -> int:
    """The total of a callgrind output file."""
    for line in Path(out).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def _callgrind(stack: Stack, directory: str, rounds: int) -> None:
    """Instruction counts of the workload alone, per configuration."""
    out = os.path.join(directory, "callgrind.out")
    prefix = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out}")
    env = dict(os.environ)
    configs: dict[str, Any] = {
        "unprofiled": lambda n: [sys.executable, WORKLOAD, str(n)],
        "pass-through hooks (floor)": lambda n: _passthrough_argv(directory, n),
        "heapprofd @4096": None,
        "memray (all allocations)": lambda n: _memray_argv(f"{directory}/m.bin", n),
    }
    counts: dict[str, int] = {}
    for name, argv in configs.items():
        counts[name] = 0
        for n, sign in ((rounds, 1), (0, -1)):
            if argv is None:
                stack.profiled(n, prefix)
            else:
                subprocess.run(
                    [*prefix, *argv(n)], env=env, check=True, capture_output=True, timeout=1800
                )
            counts[name] += sign * _instructions(out)
    base = counts["unprofiled"]
    print(f"callgrind, instructions of the workload ({rounds} rounds):")
    for name, value in counts.items():
        ratio = value / base
        print(f"  {name:26} {value:14,d}   {ratio:5.3f}x (overhead {100 * (ratio - 1):+.1f}%)")
    overhead = counts["heapprofd @4096"] / base - 1
    memray_overhead = counts["memray (all allocations)"] / base - 1
    print(f"  heapprofd overhead / memray overhead = {overhead / memray_overhead:.2f}")


def _native(stack: Stack, directory: str, rounds: int, repeat: int) -> None:
    """Overhead of native profiling on a C-extension workload, and the daemon's unwinding."""
    from heapprofd._preload import NATIVE_HEAP, library_path

    env = dict(os.environ)
    preload = {"LD_PRELOAD": str(library_path())}
    heaps = ("python", NATIVE_HEAP)
    plain, profiled, memray, per_sample, error_rates = [], [], [], [], []
    for _ in range(repeat):
        plain.append(_workload_cpu([sys.executable, NATIVE_WORKLOAD, str(rounds)], env))
        before = _cpu_seconds(stack.daemon.pid)
        cpu, trace = stack.profiled(
            rounds, workload=NATIVE_WORKLOAD, env=preload, heaps=heaps, block_client=True
        )
        spent = _cpu_seconds(stack.daemon.pid) - before
        profiled.append(cpu)
        samples, errors = _native_samples(trace)
        per_sample.append(spent / max(samples, 1) * 1e6)
        error_rates.append(errors / max(samples, 1))
        out = os.path.join(directory, "memray-native.bin")
        argv = [sys.executable, "-m", "memray", "run", "--native", "-f", "-q", "-o", out]
        memray.append(_workload_cpu([*argv, NATIVE_WORKLOAD, str(rounds)], env))
        print(f"  run: {samples} native samples, {errors} unwinding errors, daemon {spent:.2f} s")
    base = statistics.median(plain)
    print(f"C-extension workload (sqlite3, {rounds} rounds), CPU medians of {repeat} runs:")
    print(f"  unprofiled                 {base:8.3f} s   1.00x")
    for name, runs in (("heapprofd --native @4096", profiled), ("memray --native", memray)):
        value = statistics.median(runs)
        print(
            f"  {name:26} {value:8.3f} s   {value / base:4.2f}x "
            f"(overhead {100 * (value / base - 1):+.1f}%)"
        )
    overhead = statistics.median(profiled) / base - 1
    memray_overhead = statistics.median(memray) / base - 1
    print(f"  heapprofd overhead / memray overhead = {overhead / memray_overhead:.2f}")
    report_row(
        "heap_native_process",
        measured=statistics.median(profiled),
        reference=base,
        cost_ratio=statistics.median(profiled) / base,
        unit="s CPU",
        reference_name=f"unprofiled (memray --native {100 * memray_overhead:+.0f} %)",
        floor="unprofiled: 1x",
    )
    print(f"  daemon CPU per native sample: {statistics.median(per_sample):.0f} us")
    print(f"  unwinding errors: {100 * statistics.median(error_rates):.2f}% of native samples")


def _command_cpu(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """The CPU seconds of a command and every child it waited for, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out


def _heap_profile_argv(out: str) -> list[str]:
    """The command as a person types it: the console script beside this interpreter."""
    return [
        os.path.join(os.path.dirname(sys.executable), "heap_profile"),
        "--native",
        "-o",
        out,
        "--",
    ]


def _native_commands(directory: str, rounds: int, repeat: int, seconds: float) -> None:
    """The whole commands' CPU (daemons included) and the 8-thread C loop, each over its
    unprofiled run, with memray run --native beside them."""
    # bytecode is cached, as in an installed package (a checkout's develop install set
    # PYTHONDONTWRITEBYTECODE would compile every module of heap_profile at each run)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PERFETTO_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    out = os.path.join(directory, "whole.pftrace")
    memray_out = os.path.join(directory, "whole-memray.bin")
    workload = [sys.executable, NATIVE_WORKLOAD, str(rounds)]
    memray = [sys.executable, "-m", "memray", "run", "--native", "-f", "-q", "-o", memray_out]
    threads = os.path.join(directory, "native_threads")
    cc = shutil.which(os.environ.get("CC", "cc")) or "gcc"
    subprocess.run(
        [cc, "-O2", "-pthread", str(HERE / "native_threads.c"), "-o", threads], check=True
    )
    runs: dict[str, list[float]] = {}
    _command_cpu([*_heap_profile_argv(out), *workload[1:]], env)  # writes the bytecode caches
    for _ in range(repeat):
        for name, argv in (
            ("unprofiled", workload),
            ("heap_profile --native", [*_heap_profile_argv(out), *workload[1:]]),
            ("memray run --native", [*memray, *workload[1:]]),
        ):
            runs.setdefault(name, []).append(_command_cpu(argv, env)[0])
    base = statistics.median(runs["unprofiled"])
    print(f"whole commands (sqlite3, {rounds} rounds, daemons included), CPU medians of {repeat}:")
    for name, values in runs.items():
        value = statistics.median(values)
        print(
            f"  {name:26} {value:8.3f} s   {value / base:4.2f}x "
            f"(overhead {100 * (value / base - 1):+.1f}%)"
        )
    overhead = statistics.median(runs["heap_profile --native"]) / base - 1
    memray_overhead = statistics.median(runs["memray run --native"]) / base - 1
    print(f"  heap_profile overhead / memray overhead = {overhead / memray_overhead:.2f}")
    report_row(
        "heap_native_command",
        measured=100 * overhead,
        reference=100 * memray_overhead,
        cost_ratio=overhead / memray_overhead,
        unit="% CPU over unprofiled",
        reference_name="`memray run --native`",
        floor=f"unprofiled {base:.2f} s",
    )
    ops: dict[str, list[int]] = {}
    per_sample: list[float] = []
    """The profiler's CPU per sample (the command's CPU over the loop process's own, per
    sample in the trace), in µs."""
    for _ in range(repeat):
        for name, argv in (
            ("unprofiled", [threads, "8", str(seconds)]),
            ("heap_profile --native", [*_heap_profile_argv(out), threads, "8", str(seconds)]),
        ):
            command_cpu, text = _command_cpu(argv, env)
            figures = {
                key: value
                for key, _, value in (line.partition(" ") for line in text.splitlines())
                if key in ("OPS", "CPU")
            }
            ops.setdefault(name, []).append(int(figures["OPS"]))
            if name != "unprofiled":
                with open(out, "rb") as trace:
                    samples, _ = _native_samples(trace.read())
                per_sample.append((command_cpu - float(figures["CPU"])) / max(samples, 1) * 1e6)
    plain, profiled = (
        statistics.median(ops["unprofiled"]),
        statistics.median(ops["heap_profile --native"]),
    )
    cost = statistics.median(per_sample)
    # 2x slower: half the operations, one sample per `interval / mean size` of them
    needed = plain / 2 / seconds / (SAMPLING_INTERVAL / NATIVE_THREADS_MEAN_SIZE)
    floor = (
        f"the profiler's CPU per sample {cost:.1f} µs: 2x would take"
        f" {needed * cost / 1e6:.0f} cores of unwinding ({needed:,.0f} samples/s)"
    )
    print(f"8 threads malloc/free in C for {seconds} s, operations, medians of {repeat}:")
    print(f"  unprofiled                 {plain:14,d}")
    print(f"  heap_profile --native      {profiled:14,d}   {plain / max(profiled, 1):.1f}x slower")
    print(f"  {floor}")
    report_row(
        "heap_native_threads",
        measured=profiled,
        reference=plain,
        cost_ratio=plain / max(profiled, 1),
        unit="operations",
        reference_name="unprofiled",
        floor=floor,
    )


def _native_samples(trace: bytes) -> tuple[int, int]:
    """The libc.malloc heap's samples and unwinding errors in a trace."""
    parsed: Any = parse_upstream_trace(trace)
    samples = errors = 0
    for packet in parsed.packet:
        for dump in packet.profile_packet.process_dumps:
            if dump.heap_name == "libc.malloc":
                samples = max(samples, dump.stats.heap_samples)
                errors = max(errors, dump.stats.unwinding_errors)
    return samples, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200_000)
    parser.add_argument("--callgrind", type=int, metavar="ROUNDS", default=0)
    parser.add_argument("--native", type=int, metavar="ROUNDS", default=0)
    parser.add_argument("--threads-seconds", type=float, metavar="S", default=5.0)
    args = parser.parse_args()
    _build()
    env = dict(os.environ)
    rounds = str(args.rounds)
    with tempfile.TemporaryDirectory() as directory:
        _build_passthrough(directory)
        stack = Stack(directory)
        try:
            if args.callgrind:
                _callgrind(stack, directory, args.callgrind)
                return
            if args.native:
                _native(stack, directory, args.native, args.repeat)
                _native_commands(directory, args.native, args.repeat, args.threads_seconds)
                return
            plain, hooked, floor, profiled, memray = [], [], [], [], []
            samples: list[int] = []
            for _ in range(args.repeat):
                plain.append(_workload_cpu([sys.executable, WORKLOAD, rounds], env))
                hooked.append(_workload_cpu(_loaded_argv(args.rounds), env))
                floor.append(_workload_cpu(_passthrough_argv(directory, args.rounds), env))
                cpu, trace = stack.profiled(args.rounds)
                profiled.append(cpu)
                samples.append(_records(trace)[0])
                out = os.path.join(directory, "memray.bin")
                memray.append(_workload_cpu(_memray_argv(out, args.rounds), env))
            base = statistics.median(plain)
            print(f"workload ({args.rounds} rounds), CPU medians of {args.repeat} runs:")
            print(f"  unprofiled                 {base:8.3f} s   1.00x")
            for name, runs in (
                ("client loaded, idle", hooked),
                ("pass-through hooks (floor)", floor),
                ("heapprofd @4096", profiled),
                ("memray (all allocations)", memray),
            ):
                value = statistics.median(runs)
                print(
                    f"  {name:26} {value:8.3f} s   {value / base:4.2f}x "
                    f"(overhead {100 * (value / base - 1):+.1f}%)"
                )
            print(f"  (heapprofd recorded {statistics.median(samples):.0f} sampled records a run)")
            overhead = statistics.median(profiled) / base - 1
            memray_overhead = statistics.median(memray) / base - 1
            print(f"  heapprofd overhead / memray overhead = {overhead / memray_overhead:.2f}")
            per_million = []
            for _ in range(max(1, args.repeat // 2)):
                before = _cpu_seconds(stack.daemon.pid)
                _cpu, trace = stack.profiled(
                    args.rounds, interval=256, block_client=True, shmem_size=1 << 22
                )
                spent = _cpu_seconds(stack.daemon.pid) - before
                records, overran = _records(trace)
                assert not overran
                per_million.append(spent / records * 1e6)
                print(f"  daemon: {records} records in {spent:.2f} s CPU")
            print(f"daemon CPU per 1M sampled records: {statistics.median(per_million):.2f} s")
        finally:
            stack.close()


if __name__ == "__main__":
    main()
