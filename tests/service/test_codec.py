"""Results with NaN and infinities as standard JSON (drkernel/serve/codec.py, issue 24): every
non-finite float becomes "NaN"/"Infinity"/"-Infinity" and is listed under "nonfinite"; decoding
gives back the very EvalResult, strings that only look like those names included."""

import json
import math

import pytest

from drkernel.env.result import EvalResult
from drkernel.serve.codec import decode_result, encode_result
from tests.service.echo_grader import nonfinite_result


def strict_loads(text):
    """json.loads that refuses NaN/Infinity tokens, as standard JSON parsers do."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON token {name}"))


def same(a: EvalResult, b: EvalResult) -> bool:
    """Equal, NaN included (json writes NaN as NaN on both sides; NaN != NaN as a float)."""
    return json.dumps(a.to_dict(), sort_keys=True) == json.dumps(b.to_dict(), sort_keys=True)


def test_every_float_field_and_nested_value_round_trips():
    result = nonfinite_result("d")
    encoded = encode_result(result.to_dict())
    text = json.dumps(encoded, allow_nan=False)  # standard JSON, or this raises
    wire = strict_loads(text)
    assert wire["speedup"] == "NaN" and wire["coverage"] == "Infinity" and wire["kernel_ms"] == "-Infinity"
    assert wire["details"]["first_failure"]["max_abs_err"] == "Infinity"
    assert wire["nonfinite"] == sorted([
        "/coverage", "/details/first_failure/max_abs_err", "/details/first_failure/max_rel_err",
        "/details/odd~1key~0name", "/details/trials/0/errs/0", "/details/trials/0/errs/2",
        "/details/trials/0/errs/3/deep/0", "/kernel_ms", "/reference_ms", "/speedup"])
    back = EvalResult.from_dict(decode_result(wire))
    assert same(back, result)
    assert math.isnan(back.speedup) and back.coverage == math.inf and back.kernel_ms == -math.inf
    assert back.details["trials"][0]["errs"][3] == {"deep": [math.inf]}
    # strings that only look like the names stay strings
    assert back.feedback == "Infinity" and back.details["label"] == "NaN"
    assert back.details["names"] == ["Infinity", "-Infinity"]


def test_finite_results_are_unchanged_and_encoding_is_idempotent():
    plain = EvalResult(compiled=True, correct=True, speedup=1.5, details={"x": [1.0, "NaN"]}).to_dict()
    assert encode_result(plain) == plain and "nonfinite" not in encode_result(plain)
    assert decode_result(plain) == plain
    once = encode_result(nonfinite_result("d").to_dict())
    assert encode_result(once) == once
    # a row stored before results were encoded (raw floats) and re-encoded on read
    assert encode_result(json.loads(json.dumps(nonfinite_result("d").to_dict()))) == once


def test_a_pointer_to_nothing_is_an_error():
    with pytest.raises(ValueError, match="names nothing"):
        decode_result({"speedup": 1.0, "nonfinite": ["/details/missing"]})
    with pytest.raises(ValueError, match="not NaN/Infinity"):
        decode_result({"feedback": "text", "nonfinite": ["/feedback"]})
