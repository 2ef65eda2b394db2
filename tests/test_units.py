import pytest

from armillary.units import GIB, parse_quantity


@pytest.mark.parametrize(("text", "dim", "si"), [
    ("80 GiB", "bytes", 80 * GIB),
    ("2.039 TB/s", "bytes_per_s", 2.039e12),
    ("200 Gb/s", "bytes_per_s", 25e9),
    ("400 Gbps", "bytes_per_s", 50e9),
    ("312 TFLOP/s", "flop_per_s", 312e12),
    ("5 us", "s", 5e-6),
    (1.5, "s", 1.5),
])
def test_parse_quantity(text, dim, si):
    assert parse_quantity(text, dim) == pytest.approx(si)


@pytest.mark.parametrize(("text", "dim"), [("80 GiB", "bytes_per_s"), ("3 parsecs", "s"), ("fast", "bytes")])
def test_parse_quantity_rejects_wrong_units(text, dim):
    with pytest.raises(ValueError, match=dim.split("_")[0]):
        parse_quantity(text, dim)


@pytest.mark.parametrize(("text", "dimension", "expected"), [
    ("989 TFLOPS", "flop_per_s", 989e12), ("1979 TFLOPs", "flop_per_s", 1979e12),
    ("400 Gbit/s", "bytes_per_s", 50e9), ("400 Gbps", "bytes_per_s", 50e9), ("50 GB/sec", "bytes_per_s", 50e9),
    ("2 usec", "s", 2e-6), ("5 msec", "s", 5e-3)])
def test_datasheet_spellings_of_units(text, dimension, expected):
    assert parse_quantity(text, dimension) == pytest.approx(expected)


def test_a_rate_spelling_is_not_taken_for_an_amount():
    with pytest.raises(ValueError, match="expected bytes"):
        parse_quantity("989 TFLOPS", "bytes")
