"""How gpu-mem must be written: byte suffixes and fractions denied with the number to write, in the unit."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.specs import demand, finding, gpumem
from webhook.core.wire import quantity

MEM = "aliyun.com/gpu-mem"


def problem(raw: object, unit: str = "GiB") -> finding.Problem | None:
    return gpumem.memory_problem(raw, gpumem.parse(raw), MEM, unit)


@pytest.mark.parametrize(
    ("raw", "unit", "fix"),
    [
        ("3Gi", "GiB", "write 3; the unit is GiB"),
        ("3G", "GiB", "write 3; the unit is GiB"),  # 2.79 GiB, rounded up
        ("3072Mi", "GiB", "write 3; the unit is GiB"),
        ("1.5Gi", "GiB", "write 2; the unit is GiB"),
        ("100k", "GiB", "write 1; the unit is GiB"),  # never suggests 0
        ("3Gi", "MiB", "write 3072; the unit is MiB"),
        ("3Gi", "128MiB", "write 24; the unit is a block of 128 MiB"),
        (" 16Gi ", "GiB", "write 16; the unit is GiB"),
        ("2E", "GiB", "write 1862645150; the unit is GiB"),
    ],
    ids=["Gi", "G", "Mi", "fractional Gi", "k", "MiB unit", "block unit", "spaces", "exa"],
)
def test_a_byte_suffix_is_denied_with_the_number_to_write(raw, unit, fix):
    found = problem(raw, unit)
    assert found is not None
    assert found.fix == fix
    assert "with no unit suffix" in found.problem


@pytest.mark.parametrize(
    ("raw", "unit", "units"),
    [("4k", "MiB", 4000), ("80k", "MiB", 80000), ("16M", "MiB", 16_000_000), ("1k", "GiB", 1000)],
    ids=["4000-MiB", "80000-MiB", "16M-MiB", "1000-GiB"],
)
def test_a_plain_number_as_the_api_server_writes_it_is_that_number(raw, unit, units):
    # The API server keeps quantities in canonical form: a manifest's 4000 reaches the webhook and the
    # extender as "4k". Only a count past any request (16 TiB of GPU memory) is taken as bytes.
    assert quantity.parse(str(units)).canonical() == raw
    assert problem(raw, unit) is None
    container = {"resources": {"limits": {MEM: raw}}}
    assert demand.container_units(container, MEM, unit) == units


def test_the_problem_says_what_the_extender_would_count():
    found = problem("3Gi")
    assert found is not None
    assert (
        found.problem
        == "is read as 3221225472 GiB: aliyun.com/gpu-mem is a plain number of GiB, with no unit suffix"
    )
    huge = problem("9" * 40 + "Ei")  # apimachinery caps what it reads at the largest int64
    assert huge is not None and huge.problem.startswith("is read as 9223372036854775807 GiB")


@pytest.mark.parametrize(
    ("raw", "unit", "expected"),
    [
        (
            "0.5",
            "GiB",
            (
                "aliyun.com/gpu-mem counts whole GiB; a fraction of a GiB is not possible",
                "write 1; the unit is GiB",
            ),
        ),
        (
            2.5,
            "MiB",
            (
                "aliyun.com/gpu-mem counts whole MiB; a fraction of a MiB is not possible",
                "write 3; the unit is MiB",
            ),
        ),
        (
            "1500m",
            "128MiB",
            (
                "aliyun.com/gpu-mem counts whole blocks of 128 MiB; "
                "a fraction of a block of 128 MiB is not possible",
                "write 2; the unit is a block of 128 MiB",
            ),
        ),
    ],
    ids=["half", "float in MiB", "milli in blocks"],
)
def test_a_fraction_is_denied_with_the_next_whole_number(raw, unit, expected):
    assert problem(raw, unit) == expected


@pytest.mark.parametrize("raw", ["3", 3, 3.0, "3e0", "3000m", "+3", None, "0"], ids=str)
def test_whole_numbers_in_any_spelling_pass(raw):
    assert problem(raw) is None


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [("four", "is not a valid quantity"), ("-1", "cannot be negative"), ([3], "is not a valid quantity")],
    ids=["words", "negative", "list"],
)
def test_unreadable_and_negative_values_say_the_unit_too(raw, fragment):
    found = problem(raw)
    assert found is not None
    assert fragment in found.problem and found.fix.endswith("; the unit is GiB")


@given(n=st.integers(1, 10**9), suffix=st.sampled_from(["Gi", "Mi", "Ki", "Ti"]))
def test_the_suggestion_holds_the_bytes_asked_for(n, suffix):
    found = problem(f"{n}{suffix}", "MiB")
    assert found is not None
    wanted = int(found.fix.split()[1].rstrip(";"))
    asked = quantity.parse(f"{n}{suffix}").value / 2**20
    assert wanted >= asked
    assert wanted - 1 < max(asked, Fraction(1))


def test_units_in_words():
    assert [gpumem.unit_plural(u) for u in ("GiB", "MiB", "256MiB")] == ["GiB", "MiB", "blocks of 256 MiB"]
    assert gpumem.write(4, "256MiB") == "write 4; the unit is a block of 256 MiB"
