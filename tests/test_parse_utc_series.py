"""parse_utc_series gives exactly parse_utc's result, parsing most columns with one format."""

import polars as pl
import pytest
from polars.testing import assert_series_equal

from connectors.kit import parse_utc, parse_utc_series

COLUMNS = {
    "one format": ["2023-11-01T00:00:00Z", "2023-11-01T01:00:00Z", None, "2023-11-30T23:00:00Z"],
    "mixed": ["2023-11-01 00:00:00", "2023-11-01T01:00:00+08:00", "", "not a time", "2023/11/02 03:04:05",
              "2023-11-03", None, "2023-11-01T10:00Z", "  2023-11-04 05:06:07.5  "],
    "first empty": [None, "", "2023-11-01T00:00:00.123Z", "2023-11-01 00:00:00"],
    "all bad": ["x", "", None],
    "year before 1": ["-0001-01-01", "2023-07-01T00:00:00Z"],  # found by make fuzz: must not reach Python's datetime
    "nothing": [None, None],
}


@pytest.mark.parametrize("name", COLUMNS)
@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/St_Johns"])
def test_the_same_as_parse_utc(name, zone):
    frame = pl.DataFrame({"t": COLUMNS[name]}, schema={"t": pl.String})
    expected = frame.select(parse_utc("t", zone)).to_series()
    assert_series_equal(parse_utc_series(frame, "t", zone), expected, check_names=False)  # in polars: year -1 has no Python datetime


@pytest.mark.parametrize("name", COLUMNS)
@pytest.mark.parametrize("zone", ["UTC", "America/St_Johns"])
def test_a_column_of_repeated_values_is_parsed_once_per_value_with_the_same_result(name, zone):
    # Each value three times, interleaved: the distinct values are parsed and joined back in row order.
    frame = pl.DataFrame({"t": COLUMNS[name] * 3}, schema={"t": pl.String})
    expected = frame.select(parse_utc("t", zone)).to_series()
    assert_series_equal(parse_utc_series(frame, "t", zone), expected, check_names=False)


def test_a_missing_column_or_an_empty_frame_gives_nulls():
    assert parse_utc_series(pl.DataFrame({"x": ["a", "b"]}), "t").to_list() == [None, None]
    assert parse_utc_series(pl.DataFrame({"t": []}, schema={"t": pl.String}), "t").to_list() == []
