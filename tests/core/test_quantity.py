"""Quantity parsing against a table of real output of k8s.io/apimachinery/pkg/api/resource (Go)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.wire import quantity

# (input, returned as, milli value, integer?) — apimachinery's own output, as above.
TABLE = [
    ("1", "1", 1000, True),
    ("1.0", "1", 1000, True),
    ("1000m", "1", 1000, True),
    ("1e3", "1e3", 1000000, True),
    ("1E3", "1E3", 1000000, True),
    ("1e+3", "1e+3", 1000000, True),
    ("1.0e3", "1e3", 1000000, True),
    ("0.5", "500m", 500, False),
    ("500m", "500m", 500, False),
    ("1500m", "1500m", 1500, False),
    ("3000m", "3", 3000, True),
    ("3Ki", "3Ki", 3072000, True),
    ("+1", "+1", 1000, True),
    ("01", "01", 1000, True),
    ("001", "001", 1000, True),
    ("1.", "1.", 1000, True),
    (".5", "500m", 500, False),
    ("+0.5", "500m", 500, False),
    ("1000", "1k", 1000000, True),
    ("2000m", "2", 2000, True),
    ("10e-1", "1", 1000, True),
    ("5e-1", "500e-3", 500, False),
    ("1.5e3", "1500", 1500000, True),
    ("0.0001", "100u", 1, False),
    ("1.0001", "1000100u", 1001, False),
    ("0.9999999", "999999900n", 1000, True),
    ("1n", "1n", 1, False),
    ("1u", "1u", 1, False),
    ("-1", "-1", -1000, True),
    ("-0", "0", 0, True),
    ("+0", "0", 0, True),
    ("00", "0", 0, True),
]


@pytest.mark.parametrize(("text", "returned", "milli", "integer"), TABLE, ids=[row[0] for row in TABLE])
def test_every_row_of_the_apimachinery_table(text: str, returned: str, milli: int, integer: bool) -> None:
    q = quantity.parse(text)
    assert str(q) == returned
    assert q.milli_value() == milli
    assert q.is_integer() is integer


ERRORS = [
    ("1K", quantity.SUFFIX_ERROR),
    ("1g", quantity.FORMAT_ERROR),
    ("1i", quantity.SUFFIX_ERROR),
    ("0x1", quantity.FORMAT_ERROR),
    ("1_000", quantity.FORMAT_ERROR),
    ("", quantity.FORMAT_ERROR),
    ("1e", quantity.SUFFIX_ERROR),
    ("1ee2", quantity.SUFFIX_ERROR),
    (" 1", quantity.FORMAT_ERROR),
    ("1 ", quantity.FORMAT_ERROR),
    ("ki", quantity.SUFFIX_ERROR),
    ("1.2.3", quantity.FORMAT_ERROR),
    ("1Gi1", quantity.SUFFIX_ERROR),
    # No digit, and off the int64 path (too little precision, or a scale under nano): inf.Dec refuses
    # the empty numeral (k8s.io/apimachinery v0.37.1, checked with a Go program).
    ("Pi", quantity.NUMERIC_ERROR),
    ("-Ei", quantity.NUMERIC_ERROR),
    (".Ei", quantity.NUMERIC_ERROR),
    ("e-10", quantity.NUMERIC_ERROR),
    ("-e-12", quantity.NUMERIC_ERROR),
    ("1e9223372036854775808", quantity.SUFFIX_ERROR),  # past int64: ParseInt fails
]


@pytest.mark.parametrize(("text", "reason"), ERRORS, ids=[repr(e[0]) for e in ERRORS])
def test_invalid_spellings_fail_with_the_apimachinery_message(text: str, reason: str) -> None:
    with pytest.raises(quantity.QuantityError) as err:
        quantity.parse(text)
    assert err.value.reason == reason
    assert repr(text) in str(err.value)


@pytest.mark.parametrize(
    ("a", "b"), [("1", "1.0"), ("1", "1000m"), ("1k", "1000"), ("1Ki", "1024"), ("1e3", "1k"), ("2", "+2")]
)
def test_values_compare_numerically_whatever_the_spelling(a: str, b: str) -> None:
    assert quantity.parse(a) == quantity.parse(b)
    assert hash(quantity.parse(a)) == hash(quantity.parse(b))


def test_ordering_is_numeric() -> None:
    assert quantity.parse("500m") < quantity.parse("1") < quantity.parse("1Ki") < quantity.parse("1.5k")


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("1.5Gi", "1536Mi"), ("1.5Ki", "1536"), ("1.1Ki", "1126400m"), ("1.5", "1500m"), ("1024", "1024")],
)
def test_canonical_form_keeps_the_suffix_family(text: str, canonical: str) -> None:
    assert quantity.parse(text).canonical() == canonical


def test_sub_nano_values_round_up_instead_of_to_zero() -> None:
    assert quantity.parse("1e-12").value == Fraction(1, 10**9)
    assert quantity.parse("-1e-12").value == Fraction(-1, 10**9)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Ki", 0),  # on the int64 path the empty numeral is 0, as in Go
        ("Ti", 0),
        ("m", 0),
        ("1e00000000000000000000", 1),  # strconv.ParseInt takes any number of leading zeros
        ("1e00000000000000000003", 1000),
        ("1e4294967296", 1),  # then int32() wraps the exponent
        ("1e4294967299", 1000),
        ("1e-4294967293", 1000),
    ],
)
def test_odd_spellings_the_api_server_accepts_have_its_value(text: str, value: int) -> None:
    assert quantity.parse(text).value == value


def test_absurd_magnitudes_are_refused_not_computed() -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse("1e999999999")
    with pytest.raises(quantity.QuantityError):
        quantity.parse("1" * 5000)


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, 0), (2, 2), (1.5, Fraction(3, 2)), (" 1 ", 1), ("1000m", 1)]
)
def test_json_values_decode_like_the_api_server(raw: object, expected: Fraction) -> None:
    assert quantity.from_json(raw).value == expected


@pytest.mark.parametrize(
    "raw",
    [True, [], {}, "1K", [10**5000], 10**5000, float("inf"), float("nan")],
    ids=["bool", "list", "dict", "bad-suffix", "list-of-huge-int", "huge-int", "inf", "nan"],
)
def test_json_values_of_the_wrong_type_are_errors(raw: object) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.from_json(raw)


@given(st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from(["", "k", "M", "m", "u", "n"]))
def test_a_decimal_integer_with_any_si_suffix_has_the_exact_value(n: int, suffix: str) -> None:
    exponent = {"": 0, "k": 3, "M": 6, "m": -3, "u": -6, "n": -9}[suffix]
    q = quantity.parse(f"{n}{suffix}")
    assert q.value == Fraction(n) * Fraction(10) ** exponent


@given(st.decimals(min_value=-(10**9), max_value=10**9, allow_nan=False, places=9))
def test_canonical_form_parses_back_to_the_same_value(d: object) -> None:
    q = quantity.parse(str(d).replace("E", "e"))
    assert quantity.parse(q.canonical()) == q
    assert quantity.parse(str(q)) == q


@given(st.text(alphabet="0123456789.+-eEinumkKMGTPx_ ", max_size=12))
def test_the_parser_either_returns_a_quantity_or_raises_quantity_error(text: str) -> None:
    try:
        q = quantity.parse(text)
    except quantity.QuantityError:
        return
    assert isinstance(q.value, Fraction)


@given(st.integers(min_value=0, max_value=10**6))
def test_milli_spelling_is_whole_exactly_when_divisible_by_1000(n: int) -> None:
    assert quantity.parse(f"{n}m").is_integer() is (n % 1000 == 0)


def _fields(q: quantity.Quantity) -> tuple[int, int, quantity.Format, str | None]:
    return (q.mantissa, q.exponent, q.format, q.text)


@given(st.from_regex(r"[0-9]{1,18}", fullmatch=True))
def test_plain_digit_fast_path_equals_the_general_parser(text: str) -> None:
    assert _fields(quantity._parse_plain(text)) == _fields(quantity._parse_general(text))
    assert _fields(quantity.parse(text)) == _fields(quantity._parse_general(text))


@given(st.integers(min_value=-(10**20), max_value=10**20))
def test_json_integers_parse_as_their_decimal_spelling(n: int) -> None:
    assert _fields(quantity.from_json(n)) == _fields(quantity._parse_general(str(n)))


@pytest.mark.parametrize(
    "text", ["0", "00", "000", "1000", "01000", "007", "999999999999999999", "100000000000000000"]
)
def test_plain_digit_edge_cases_keep_apimachinery_spelling(text: str) -> None:
    assert _fields(quantity._parse_plain(text)) == _fields(quantity._parse_general(text))


def test_non_ascii_digits_are_not_plain_and_fail_like_the_general_parser() -> None:
    with pytest.raises(quantity.QuantityError) as err:
        quantity.parse("١٢")  # Arabic-Indic digits: str.isdigit() is true for them
    assert err.value.reason == quantity.FORMAT_ERROR


def test_a_bad_spelling_fails_again_when_parsed_twice() -> None:
    # Parsed values are cached; errors must not be.
    for _ in range(2):
        with pytest.raises(quantity.QuantityError):
            quantity.parse("1K")


_MANTISSAS = st.integers(min_value=-(10**30), max_value=10**30)
_EXPONENTS = st.integers(min_value=-40, max_value=40)


@given(_MANTISSAS, _EXPONENTS)
def test_integer_milli_value_equals_the_fraction_ceiling(mantissa: int, exponent: int) -> None:
    q = quantity.Quantity(mantissa, exponent, quantity.Format.DECIMAL_SI)
    scaled = q.value * 1000
    assert q.milli_value() == -((-scaled.numerator) // scaled.denominator)


@given(_MANTISSAS, _EXPONENTS, _MANTISSAS, _EXPONENTS)
def test_integer_comparisons_equal_fraction_comparisons(a: int, a_exp: int, b: int, b_exp: int) -> None:
    qa = quantity.Quantity(a, a_exp, quantity.Format.DECIMAL_SI)
    qb = quantity.Quantity(b, b_exp, quantity.Format.DECIMAL_SI)
    va, vb = qa.value, qb.value
    assert (qa == qb, qa < qb, qa <= qb, qa > qb, qa >= qb) == (
        va == vb,
        va < vb,
        va <= vb,
        va > vb,
        va >= vb,
    )
    assert (qa > 0, qa == b, qa < vb) == (va > 0, va == b, va < vb)
    assert hash(qa) == hash(va)
