"""Text configs: everything upstream's test configs use survives our parse byte for byte."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import text_format
from perfetto_cmd._config import (
    config_from_light_options,
    parse_size_kb,
    parse_text_config,
    parse_time_ms,
)
from perfetto_cmd._errors import CliError
from perfetto_protos.upstream import upstream_message_class

# Our own configs, one per kind of upstream test config (same fields, not the same files).
CONFIGS = {
    "ftrace": """
        buffers { size_kb: 65536 fill_policy: RING_BUFFER }
        data_sources { config { name: "linux.ftrace" target_buffer: 0
          ftrace_config {
            buffer_size_kb: 8192 drain_period_ms: 500 ftrace_events: "sched/sched_switch"
            atrace_categories: "gfx" atrace_apps: "*" symbolize_ksyms: true
            ksyms_mem_policy: KSYMS_RETAIN compact_sched { enabled: true }
            disable_generic_events: true
          } } }
        duration_ms: 10000
    """,
    "process_and_sys_stats": """
        buffers { size_kb: 1024 }
        data_sources { config { name: "linux.process_stats"
          process_stats_config { scan_all_processes_on_start: true proc_stats_poll_ms: 1000
            record_thread_names: true } } }
        data_sources { config { name: "linux.sys_stats"
          sys_stats_config { meminfo_period_ms: 1000 meminfo_counters: MEMINFO_MEM_TOTAL
            vmstat_period_ms: 1000 vmstat_counters: VMSTAT_NR_FREE_PAGES stat_period_ms: 1000
            stat_counters: STAT_CPU_TIMES cpufreq_period_ms: 500 psi_period_ms: 1000 } } }
        producers { producer_name: "perfetto.traced_probes" shm_size_kb: 4096 page_size_kb: 4 }
    """,
    "android": """
        buffers { size_kb: 32768 } buffers { size_kb: 32768 }
        data_sources { config { name: "android.log" target_buffer: 1
          android_log_config { log_ids: LID_DEFAULT log_ids: LID_CRASH } } }
        data_sources { config { name: "android.power"
          android_power_config { battery_poll_ms: 1000 collect_power_rails: true } } }
        data_sources { config { name: "android.system_property"
          android_system_property_config { poll_ms: 1000 property_name: "debug.x" } } }
        data_sources { config { name: "android.packages_list"
          packages_list_config { package_name_filter: "com.example" } } }
    """,
    "profilers": """
        buffers { size_kb: 100024 }
        data_sources { config { name: "android.heapprofd"
          heapprofd_config { sampling_interval_bytes: 4096 process_cmdline: "adbd"
            shmem_size_bytes: 8388608
            continuous_dump_config { dump_phase_ms: 10000 dump_interval_ms: 1000 } } } }
        data_sources { config { name: "android.java_hprof"
          java_hprof_config { process_cmdline: "system_server" } } }
        data_sources { config { name: "linux.perf"
          perf_event_config { all_cpus: true sampling_frequency: 100 } } }
        data_sources { config { name: "linux.inode_file_map"
          inode_file_config { scan_interval_ms: 1000 scan_delay_ms: 100 scan_batch_size: 10
            mount_point_mapping { mountpoint: "/data" scan_roots: "/data/app" } } } }
    """,
    "gpu_and_track_event": """
        buffers { size_kb: 1024 }
        data_sources { config { name: "com.example.mytrace"
          gpu_counter_config { counter_period_ns : 1000000 counter_ids: 3 counter_ids: 1 } } }
        data_sources { config { name: "track_event"
          track_event_config { enabled_categories: "rendering" disabled_categories: "*" } } }
    """,
    "statsd": """
        buffers { size_kb: 1024 }
        data_sources { config { name: "android.statsd"
          statsd_tracing_config { push_atom_id: ATOM_BLE_SCAN_STATE_CHANGED
            pull_config { pull_atom_id: ATOM_CPU_TIME_PER_UID pull_frequency_ms: 1000
              packages: "com.example" } } } }
    """,
    "qnx": """
        buffers { size_kb: 1024 }
        data_sources { config { name: "qnx.kernel"
          qnx_config { qnx_kernel_buffers: 32 qnx_kernel_kbuffers: 4 qnx_kernel_wide_events: true
            qnx_cache_pages: 16 qnx_cache_max_pages: 64 qnx_trace_buffer_init_bytes: 1024 } } }
    """,
    "long_trace_and_triggers": """
        write_into_file: true file_write_period_ms: 2500 flush_period_ms: 20000
        max_file_size_bytes: 1000000000 unique_session_name: "long" bugreport_score: 10
        incremental_state_config { clear_period_ms: 5000 }
        buffers { size_kb: 32768 fill_policy: DISCARD }
        data_sources { config { name: "linux.process_stats" } }
        trigger_config { trigger_mode: STOP_TRACING trigger_timeout_ms: 30000
          use_clone_snapshot_if_available: true
          triggers { name: "t1" stop_delay_ms: 500 producer_name_regex: ".*" } }
        trace_filter { bytecode: "\\x0b\\x01" }
    """,
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_text_configs_keep_every_upstream_field(name: str) -> None:
    text = CONFIGS[name]
    expected: Any = upstream_message_class("perfetto.protos.TraceConfig")()
    text_format.Parse(text, expected)
    ours = parse_text_config(text, f"{name}.cfg")
    got: Any = upstream_message_class("perfetto.protos.TraceConfig")()
    got.ParseFromString(ours.SerializeToString())
    assert got == expected
    assert len(got.data_sources) == len(expected.data_sources) >= 1


def test_unknown_field_names_the_place_and_lossy_drops_it() -> None:
    text = 'buffers { size_kb: 1 }\ndata_sources { config { name: "x" no_such_thing: 3 } }\n'
    with pytest.raises(CliError, match=r"^my\.cfg:2:.*no_such_thing"):
        parse_text_config(text, "my.cfg")
    config = parse_text_config(text, "my.cfg", lossy=True)
    assert config.data_sources[0].config.name == "x"


@pytest.mark.parametrize(
    ("text", "ms"), [("10s", 10_000), ("500ms", 500), ("2m", 120_000), ("1h", 3_600_000),
                     ("0", 0), ("10", None), ("s", None), ("-1s", None)]
)  # fmt: skip
def test_time_units(text: str, ms: int | None) -> None:
    assert parse_time_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "kb"), [("32mb", 32768), ("1gb", 1048576), ("64k", 64), ("2m", 2048),
                     ("7kb", 7), ("10", None), ("1tb", None)]
)  # fmt: skip
def test_size_units(text: str, kb: int | None) -> None:
    assert parse_size_kb(text) == kb


def test_light_mode_defaults_are_upstreams() -> None:
    light = config_from_light_options(None, None, None, [], [])
    assert light.config.duration_ms == 10_000
    assert [b.size_kb for b in light.config.buffers] == [32 * 1024]
    assert not light.config.write_into_file
    assert light.config.flush_period_ms == 30_000
    assert light.ignored == []
