"""linux.ftrace: the kernel's scheduling and other trace events, per CPU."""

from perfetto_probes.ftrace._ftrace_data_source import FtraceDataSource

__all__ = ["FtraceDataSource"]
