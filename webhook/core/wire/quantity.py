"""Kubernetes `resource.Quantity`, parsed exactly as apimachinery's `ParseQuantity` does.

The parser is a transliteration of `parseQuantityString`/`ParseQuantity` in
k8s.io/apimachinery/pkg/api/resource/quantity.go, so every spelling the API server accepts is accepted
here with the same value, and every one it rejects fails with its error text. `canonical()` follows
`CanonicalizeBytes`. Values are kept as an exact integer mantissa and a power-of-ten exponent.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from fractions import Fraction

FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_ERROR = "unable to parse quantity's suffix"
NUMERIC_ERROR = "unable to parse numeric part of quantity"
# Ours: apimachinery would try to build numbers of any size; we refuse absurd ones instead of
# spending memory on them (no GPU count or memory size comes near these bounds).
TOO_LARGE_ERROR = "quantity is too large"

_MAX_DIGITS = 1000
_MAX_EXPONENT = 1000
_NANO = -9
_MAX_INT64 = 2**63 - 1
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
# Plain digit strings this long always take apimachinery's int64 path (18 digits < MaxInt64).
_PLAIN_DIGITS = 18
# Spellings seen in real manifests are short and few; longer strings are not worth caching.
_CACHED_LENGTH = 32


class QuantityError(ValueError):
    """A string that apimachinery would not parse as a Quantity."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(reason)
        self.text = text
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.text!r}: {self.reason}"


class Format(enum.StrEnum):
    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {v: k for k, v in _BINARY_SUFFIXES.items()}


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity: value = mantissa * 10**exponent.

    `text` is the input string when apimachinery would reuse it verbatim (its "already canonical"
    fast path); `str()` then returns it, as the API server does.
    """

    mantissa: int
    exponent: int
    format: Format
    text: str | None = None

    @property
    def value(self) -> Fraction:
        return Fraction(self.mantissa) * Fraction(10) ** self.exponent

    def is_zero(self) -> bool:
        return self.mantissa == 0

    def is_negative(self) -> bool:
        return self.mantissa < 0

    def milli_value(self) -> int:
        """`MilliValue()`: the value in thousandths, rounded up (ceiling) like apimachinery."""
        # Integer arithmetic, exactly ceil(mantissa * 10**(exponent + 3)); Fraction is ~10x slower.
        shift = self.exponent + 3
        scale: int = 10 ** abs(shift)
        if shift >= 0:
            return self.mantissa * scale
        return -((-self.mantissa) // scale)

    def is_integer(self) -> bool:
        """The extended-resource check: rounded up to milli, the value is a multiple of 1000."""
        return self.milli_value() % 1000 == 0

    def to_int(self) -> int:
        """The whole value of an integer quantity (after the same milli round-up as the API server)."""
        if not self.is_integer():
            raise ValueError(f"{self} is not a whole number")
        return self.milli_value() // 1000

    def canonical(self) -> str:
        """The canonical form apimachinery writes (`1.5` -> `1500m`, `1.5Gi` -> `1536Mi`)."""
        if self.mantissa == 0:
            return "0"
        fmt = self.format
        if fmt is Format.BINARY_SI:
            if -1024 < self.value < 1024 or (self.value.denominator != 1):
                fmt = Format.DECIMAL_SI
            else:
                amount, times = _remove_factors(int(self.value), 1024)
                return f"{amount}{_BINARY_BY_EXPONENT.get(times * 10, '')}"
        amount, times = _remove_factors(self.mantissa, 10)
        exponent = self.exponent + times
        # Go's % keeps the sign of the dividend; bring the exponent down to a multiple of 3.
        while exponent % 3 != 0:
            amount *= 10
            exponent -= 1
        if fmt is Format.DECIMAL_EXPONENT:
            return f"{amount}" if exponent == 0 else f"{amount}e{exponent}"
        return f"{amount}{_DECIMAL_BY_EXPONENT.get(exponent, '')}"

    def __str__(self) -> str:
        return self.text if self.text is not None else self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def _compare(self, other: object) -> int | None:
        """-1, 0 or 1 as self is below, equal to or above `other`; None for a type we do not compare."""
        if isinstance(other, Quantity):
            return _compare(self.mantissa, self.exponent, other.mantissa, other.exponent)
        if isinstance(other, int):
            return _compare(self.mantissa, self.exponent, other, 0)
        if isinstance(other, Fraction):
            value = self.value
            return (value > other) - (value < other)
        return None

    def __eq__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order == 0

    def __lt__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order < 0

    def __le__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order <= 0

    def __gt__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order > 0

    def __ge__(self, other: object) -> bool:
        order = self._compare(other)
        return NotImplemented if order is None else order >= 0

    def __hash__(self) -> int:
        # Equal to the hash of the equal int or Fraction, as == promises.
        if self.exponent >= 0:
            return hash(self.mantissa * 10**self.exponent)
        return hash(self.value)


def _compare(a: int, a_exp: int, b: int, b_exp: int) -> int:
    """Compare a * 10**a_exp with b * 10**b_exp exactly, in integers."""
    if a_exp > b_exp:
        a *= 10 ** (a_exp - b_exp)
    elif b_exp > a_exp:
        b *= 10 ** (b_exp - a_exp)
    return (a > b) - (a < b)


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    negative = value < 0
    result = -value if negative else value
    times = 0
    while result >= base and result % base == 0:
        result //= base
        times += 1
    return (-result if negative else result), times


@dataclass(frozen=True, slots=True)
class _Parts:
    positive: bool
    value: str
    num: str
    denom: str
    suffix: str


def _split(text: str) -> _Parts:
    """`parseQuantityString`, including its quirks (`1.` and `.5` are numbers, `-` alone is zero)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return _Parts(positive, "0", "0", "", "")
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos >= end:
        return _Parts(positive, text, text[start:], "", "")
    num = text[start:pos] or "0"
    denom = ""
    if text[pos] == ".":
        pos += 1
        dstart = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[dstart:pos]
        if pos >= end:
            return _Parts(positive, text, num, denom, "")
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(text, FORMAT_ERROR)
    return _Parts(positive, value, num, denom, text[suffix_start:])


def _interpret(suffix: str, text: str) -> tuple[int, int, Format]:
    """`suffixHandler.interpret`: (base, exponent, format)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in ("+", "-") else digits
        # strconv.ParseInt(.., 10, 64): a sign, any number of digits (leading zeros too), within int64;
        # then int32(parsed), which wraps: "1e4294967296" is 1e0, as the API server reads it.
        if body and all(c in _DIGITS for c in body) and -(2**63) <= (parsed := int(digits)) < 2**63:
            exponent = (parsed + 2**31) % 2**32 - 2**31
            if abs(exponent) > _MAX_EXPONENT:
                raise QuantityError(text, TOO_LARGE_ERROR)
            return 10, exponent, Format.DECIMAL_EXPONENT
    raise QuantityError(text, SUFFIX_ERROR)


def parse(text: str) -> Quantity:
    """`ParseQuantity`: parse a quantity string or raise `QuantityError` with apimachinery's message."""
    if not isinstance(text, str):
        raise QuantityError(repr(text), FORMAT_ERROR)
    if len(text) <= _CACHED_LENGTH:
        return _parse_cached(text)
    return _parse_general(text)


# Quantity is immutable, so one parsed value can be shared; errors are raised again, never cached.
@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Quantity:
    if len(text) <= _PLAIN_DIGITS and text.isascii() and text.isdigit():
        return _parse_plain(text)
    return _parse_general(text)


def _parse_plain(text: str) -> Quantity:
    """`^[0-9]{1,18}$`: what `_parse_general` returns for it, without the general machinery.

    Such a string always takes apimachinery's int64 path; the text is reused unless that path would
    rewrite it (trailing "000" becomes a "k" suffix, zero becomes "0").
    """
    digits = int(text)
    if digits == 0:
        return Quantity(0, 0, Format.DECIMAL_SI, text if text == "0" else None)
    reused = not text.endswith("000")
    return Quantity(digits, 0, Format.DECIMAL_SI, text if reused else None)


def _parse_general(text: str) -> Quantity:
    """The transliteration of `ParseQuantity` for any string."""
    if text == "":
        raise QuantityError(text, FORMAT_ERROR)
    if text == "0":
        return Quantity(0, 0, Format.DECIMAL_SI, text)
    parts = _split(text)
    base, exponent, fmt = _interpret(parts.suffix, text)
    if len(parts.num) + len(parts.denom) > _MAX_DIGITS:
        raise QuantityError(text, TOO_LARGE_ERROR)

    sign = 1 if parts.positive else -1
    digits = int(parts.num + parts.denom)
    if base == 10:
        mantissa, exp10 = digits, exponent - len(parts.denom)
    else:
        # Binary suffix: value = digits * 2**exponent / 10**len(denom).
        mantissa, exp10 = digits * 2**exponent, -len(parts.denom)

    # The int64 fast path: when it applies and the input is already canonical, the string is reused.
    fast = _fast_path_applies(parts, exponent, fmt, digits)
    if fast and _reused(parts, exponent, fmt, digits):
        return Quantity(sign * mantissa, exp10, fmt, text)
    if not fast and not any(c in _DIGITS for c in parts.value):
        # inf.Dec's SetString of "", "." or "-" fails; the fast path reads the same as 0 ("Ki", "m").
        raise QuantityError(text, NUMERIC_ERROR)

    # The inf.Dec path rounds away from zero to nano and caps BinarySI at MaxInt64.
    if exp10 < _NANO and mantissa != 0:
        scale = 10 ** (_NANO - exp10)
        mantissa = -((-mantissa) // scale)
        exp10 = _NANO
    if fmt is Format.BINARY_SI and Fraction(mantissa) * Fraction(10) ** exp10 > _MAX_INT64:
        mantissa, exp10 = _MAX_INT64, 0
    if mantissa == 0:
        return Quantity(0, 0, Format.DECIMAL_SI if fmt is Format.BINARY_SI else fmt)
    return Quantity(sign * mantissa, exp10, fmt)


def _fast_path_applies(parts: _Parts, exponent: int, fmt: Format, digits: int) -> bool:
    """Whether ParseQuantity takes its int64 path: enough precision, scale at least nano, no overflow."""
    if fmt is Format.BINARY_SI:
        if not (exponent >= 0 and parts.denom == ""):
            return False
        precision = 15 - len(parts.num) - int(exponent * 3 / 10) - 1
        return precision >= 0 and digits * (1 << exponent) <= _MAX_INT64
    precision = 18 - (len(parts.num) + len(parts.denom))
    return precision >= 0 and exponent - len(parts.denom) >= _NANO and digits <= _MAX_INT64


def _reused(parts: _Parts, exponent: int, fmt: Format, digits: int) -> bool:
    """On the int64 path, whether the input is already canonical, so the API server keeps the string."""
    if fmt is Format.BINARY_SI:
        return exponent % 10 == 0 and (digits & 0x07) != 0
    shifted = parts.num + parts.denom
    return (exponent - len(parts.denom)) % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


def from_json(value: object) -> Quantity:
    """A Quantity as it arrives in JSON: a string (surrounding spaces trimmed), a number, or null."""
    if value is None:
        return Quantity(0, 0, Format.DECIMAL_SI)
    if isinstance(value, bool):
        raise QuantityError(repr(value), FORMAT_ERROR)
    if isinstance(value, int):
        # Python will not print ints of more than 4300 digits; no real quantity comes near.
        if value.bit_length() > 3 * _MAX_DIGITS:
            raise QuantityError("<a number of more than 1000 digits>", TOO_LARGE_ERROR)
        return parse(str(value))
    if isinstance(value, float):
        return parse(repr(value))
    if isinstance(value, str):
        return parse(value.strip())
    raise QuantityError(f"<{type(value).__name__}>", FORMAT_ERROR)
