"""The data source names traced_probes registers, and the error for an unknown one."""

import pytest
from perfetto_probes import DATA_SOURCES, ProbesError, data_source_factory


def test_upstreams_data_source_names_are_registered() -> None:
    assert set(DATA_SOURCES) >= {
        "linux.ftrace",
        "linux.process_stats",
        "linux.sys_stats",
        "linux.system_info",
    }


def test_an_unknown_name_is_one_clear_error() -> None:
    with pytest.raises(ProbesError, match=r"no probes data source is named 'linux\.nope'"):
        data_source_factory("linux.nope")
