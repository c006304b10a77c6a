"""The codec, type by type: exact round trips, the stored forms, and errors that name a path."""

from __future__ import annotations

import collections
import dataclasses
import enum
import json
import math
import os
import pathlib
import struct
import subprocess
import sys
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field, RootModel

from agentreplay_core._codec import (
    TAG,
    canonical_bytes,
    decode,
    dumps,
    encode,
    loads,
    register_type,
    unencodable_marker,
)
from agentreplay_core._errors import SerializationError
from tests.core.test_codec_properties import Box, Color, Item, Pair, Perm, same

BERLIN = ZoneInfo("Europe/Berlin")


def round_trip(value: Any, **kwargs: Any) -> Any:
    """Through encode, JSON text and decode, as a store does."""
    return decode(loads(dumps(encode(value))), **kwargs)


def stored(value: Any) -> Any:
    """The encoded form as plain JSON data (what the tests compare with literals)."""
    return json.loads(canonical_bytes(encode(value)))


# --- plain JSON ---------------------------------------------------------------------------


def test_plain_json_is_stored_as_is_and_copied() -> None:
    request: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                               "n": 2, "t": 0.5, "stream": False, "stop": None}
    encoded = encode(request)
    assert encoded == request
    request["messages"].append({"role": "assistant"})  # the agent keeps mutating its request
    assert len(encoded["messages"]) == 1


def test_key_order_does_not_change_the_canonical_bytes() -> None:
    assert canonical_bytes(encode({"a": 1, "b": 2})) == canonical_bytes(encode({"b": 2, "a": 1}))
    assert canonical_bytes(encode({"b": 2, "a": 1})) == b'{"a":1,"b":2}'


# --- strings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a\x00b", ["a", 0, "b"]),
        ("\x00", [0]),
        ("x\ud800", ["x", 0xD800]),
        ("\ud83d\ude00!", [0xD83D, 0xDE00, "!"]),  # two lone surrogates, not one emoji
    ],
)
def test_strings_jsonb_cannot_hold_become_runs_and_code_points(text: str, parts: list[Any]) -> None:
    assert stored(text) == {TAG: "str", "v": parts}
    assert same(round_trip(text), text)


def test_ordinary_unicode_stays_a_string() -> None:
    text = 'é 😀 \u2028 "quoted" \\ \x1f'
    assert encode(text) == text
    assert round_trip({text: text}) == {text: text}


def test_a_key_with_nul_turns_the_dict_into_pairs() -> None:
    value = {"a\x00": 1, "b": 2}
    assert stored(value)[TAG] == "map"
    assert same(round_trip(value), value)


# --- numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0.0, 0.1, 1e15, 9999999999999998.0, -1e-7, 5e-324, 2.5e-05])
def test_floats_jsonb_keeps_are_native(x: float) -> None:
    assert encode(x) == x
    assert same(round_trip(x), x)


@pytest.mark.parametrize(
    ("x", "text"),
    [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (-0.0, "-0.0"),
     (1e16, "1e+16"), (-1.5e300, "-1.5e+300"), (1.7976931348623157e308, "1.7976931348623157e+308")],
)
def test_other_floats_are_tagged(x: float, text: str) -> None:
    assert stored(x) == {TAG: "float", "v": text}
    assert same(round_trip(x), x)


def test_an_unusual_nan_keeps_its_bits() -> None:
    x = struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]
    assert stored(x) == {TAG: "float", "v": "nan", "bits": "fff8000000000123"}
    assert struct.pack(">d", round_trip(x)).hex() == "fff8000000000123"


@pytest.mark.parametrize("n", [2**63 - 1, -(2**63), 0, -1])
def test_ints_in_64_bits_are_native(n: int) -> None:
    assert encode(n) == n


@pytest.mark.parametrize("n", [2**63, -(2**63) - 1, 2**64, -(10**40)])
def test_bigger_ints_are_decimal_strings(n: int) -> None:
    assert stored(n) == {TAG: "int", "v": str(n)}
    assert same(round_trip(n), n)


def test_ints_too_long_for_str_still_round_trip() -> None:
    n = 7**20000  # about 17,000 digits, past Python's int/str conversion limit
    assert round_trip(n) == n


def test_bool_is_not_an_int() -> None:
    assert same(round_trip([True, 1, 1.0]), [True, 1, 1.0])


@pytest.mark.parametrize("d", ["1.10", "1E+2", "-0", "NaN", "-sNaN12", "Infinity", "-Infinity",
                               "0.000", "123456789012345678901234567890.5"])
def test_decimals_keep_digits_and_exponent(d: str) -> None:
    assert stored(Decimal(d)) == {TAG: "decimal", "v": d}
    assert same(round_trip(Decimal(d)), Decimal(d))


def test_complex() -> None:
    assert stored(1 + 2j) == {TAG: "complex", "v": [1.0, 2.0]}
    value = complex(-0.0, math.inf)
    assert same(round_trip(value), value)


# --- float vectors ------------------------------------------------------------------------


def test_a_float_vector_is_packed_little_endian() -> None:
    vector = [i / 7 for i in range(32)]
    packed = stored(vector)
    assert packed.keys() == {TAG, "f64le"} and packed[TAG] == "floats"
    raw = struct.pack("<32d", *vector)
    import base64

    assert base64.b64decode(packed["f64le"]) == raw
    assert same(round_trip(vector), vector)


def test_a_tuple_of_floats_holds_a_packed_vector() -> None:
    vector = tuple(i / 3 for i in range(40))
    assert stored(vector)["v"][TAG] == "floats"
    assert same(round_trip(vector), vector)


def test_short_or_mixed_lists_stay_lists() -> None:
    assert encode([0.5] * 31) == [0.5] * 31
    mixed = [0.5] * 40 + [1]
    assert encode(mixed) == mixed


def test_a_vector_keeps_special_floats_bit_for_bit() -> None:
    vector = [math.nan, -0.0, math.inf, 5e-324, 1e300] * 7
    back = round_trip(vector)
    assert struct.pack("<35d", *back) == struct.pack("<35d", *vector)


# --- bytes, time, ids, paths ----------------------------------------------------------------


def test_bytes_and_bytearray() -> None:
    assert stored(b"\x00\x01") == {TAG: "bytes", "v": "AAE="}
    assert stored(bytearray(b"hi")) == {TAG: "bytearray", "v": "aGk="}
    assert same(round_trip(bytearray(b"hi")), bytearray(b"hi"))


@pytest.mark.parametrize(
    "value",
    [
        datetime(2024, 5, 1, 12, 30, 1, 5),
        datetime(2024, 5, 1, tzinfo=timezone.utc),
        datetime(2024, 5, 1, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
        datetime(2024, 5, 1, tzinfo=timezone(timedelta(hours=1), "CET")),
        datetime(2024, 5, 1, tzinfo=BERLIN),
        datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN, fold=1),  # the second 02:30 that night
        datetime(2024, 3, 31, 2, 30, tzinfo=BERLIN),  # a wall time that does not exist
        date(1, 1, 1),
        time(23, 59, 59, 999999),
        time(1, 2, tzinfo=timezone(timedelta(hours=2))),
        time(1, 2, tzinfo=BERLIN, fold=1),
        timedelta(days=-3, seconds=5, microseconds=7),
    ],
)
def test_dates_and_times_round_trip_with_their_zone(value: Any) -> None:
    assert same(round_trip(value), value)


def test_a_zoneinfo_datetime_is_stored_readably() -> None:
    assert stored(datetime(2024, 5, 1, 9, tzinfo=BERLIN)) == {
        TAG: "datetime", "v": "2024-05-01T09:00:00+02:00", "tz": "Europe/Berlin"}


def test_uuid_and_paths() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert stored(u) == {TAG: "uuid", "v": "12345678-1234-5678-1234-567812345678"}
    for path in (pathlib.Path("/tmp/x y"), pathlib.PurePosixPath("a/b"),
                 pathlib.PureWindowsPath(r"C:\Users\me")):
        assert same(round_trip(path), path)
    assert stored(pathlib.PureWindowsPath(r"C:\x")) == {
        TAG: "path", "cls": "PureWindowsPath", "v": "C:\\x"}


# --- containers -----------------------------------------------------------------------------


def test_tuples_stay_tuples_and_lists_stay_lists() -> None:
    value = ([1, (2, [3])], ())
    assert stored((1, 2)) == {TAG: "tuple", "v": [1, 2]}
    assert same(round_trip(value), value)


def test_set_elements_are_sorted_by_canonical_bytes() -> None:
    # canonical bytes: b'"b"' < b'10' < b'2' < b'{"__ar__"...}' (0x22 < 0x31 < 0x32 < 0x7b)
    assert stored({2, "b", 10, (1,)}) == {
        TAG: "set", "v": ["b", 10, 2, {TAG: "tuple", "v": [1]}]}
    assert same(round_trip(frozenset({1, "a"})), frozenset({1, "a"}))


def test_set_order_does_not_depend_on_the_hash_seed() -> None:
    script = ("from agentreplay_core._codec import canonical_bytes, encode; import sys; "
              "sys.stdout.write(canonical_bytes(encode({'pear', 'apple', 'fig', 'kiwi', 'lime'}))"
              ".decode())")
    outputs = {
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        for seed in ("1", "2", "3")
    }
    assert outputs == {'{"__ar__":"set","v":["apple","fig","kiwi","lime","pear"]}'}


def test_dicts_with_other_keys_become_sorted_pairs() -> None:
    value = {2: "two", 1: "one", (0, "x"): None, None: 1.5}
    encoded = stored(value)
    assert encoded[TAG] == "map"
    assert [pair[0] for pair in encoded["v"]] == [1, 2, None, {TAG: "tuple", "v": [0, "x"]}]
    assert same(round_trip(value), value)


def test_a_dict_using_the_reserved_key_is_escaped() -> None:
    value = {TAG: "bytes", "v": "AAE="}  # looks like a tag, is user data
    assert stored(value) == {TAG: "dict", "v": {TAG: "bytes", "v": "AAE="}}
    assert same(round_trip(value), value)
    nested = {"outer": [{TAG: {TAG: 1}}]}
    assert same(round_trip(nested), nested)


def test_subclasses_of_builtins_are_stored_as_the_base_type() -> None:
    class Name(str):
        pass

    ordered = collections.OrderedDict([("b", 1), ("a", Name("x"))])
    assert same(round_trip(ordered), {"b": 1, "a": "x"})
    assert same(round_trip(collections.defaultdict(list, a=[1])), {"a": [1]})


# --- objects --------------------------------------------------------------------------------


class Message(BaseModel):
    role: str
    content: str | list[Any]
    created: datetime | None = None
    sender: str = Field(default="user", alias="from")


class Conversation(BaseModel):
    messages: list[Message]
    meta: dict[str, Any] = {}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int


class Numbers(RootModel[list[int]]):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class Frozen:
    a: int
    b: tuple[int, ...] = ()


@dataclasses.dataclass
class Counted:
    n: int
    doubled: int = dataclasses.field(init=False)
    calls: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.doubled = self.n * 2
        self.calls.append("post_init")


class Level(enum.IntEnum):
    LOW = 1


class Mode(str, enum.Enum):
    FAST = "fast"


def test_pydantic_models_round_trip_with_nested_models_and_fields_set() -> None:
    conversation = Conversation(messages=[
        Message(role="user", content="hi", created=datetime(2024, 1, 1, tzinfo=BERLIN)),
        Message.model_validate(
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}], "from": "bot"}),
    ])
    back = round_trip(conversation)
    assert type(back) is Conversation and back == conversation
    assert back.messages[0].model_fields_set == {"role", "content", "created"}
    assert back.model_dump(exclude_unset=True) == conversation.model_dump(exclude_unset=True)
    encoded = stored(conversation)
    assert encoded["cls"] == "tests.core.test_codec:Conversation"
    assert encoded["set"] == ["messages"]


def test_pydantic_extras_and_root_models() -> None:
    item = Item.model_validate({"name": "n", "payload": {1, 2}, "extra key": b"x"})
    assert same(round_trip(item), item)
    numbers = Numbers([1, 2])
    assert round_trip(numbers) == numbers and type(round_trip(numbers)) is Numbers


def test_dataclasses_come_back_without_rerunning_init() -> None:
    counted = Counted(3)
    back = round_trip(counted)
    assert type(back) is Counted and back == counted
    assert back.calls == ["post_init"]  # __post_init__ ran once, when the agent made it
    frozen = Frozen(1, (2, 3))
    assert same(round_trip(frozen), frozen)
    assert same(round_trip(Box(value=[Box(1)])), Box(value=[Box(1)]))


def test_named_tuples_and_enums() -> None:
    pair = Pair(left=Color.RED, right=Perm.R | Perm.W)
    assert same(round_trip(pair), pair)
    for member in (Level.LOW, Mode.FAST, Color.BLUE):
        assert round_trip(member) is member
    assert stored(Color.RED) == {TAG: "enum", "cls": "tests.core.test_codec_properties:Color",
                                 "v": "red"}


def test_restore_objects_false_gives_plain_data_without_importing() -> None:
    value = {"msg": Message(role="user", content="x"), "box": Box(Color.RED, "b"),
             "pair": Pair(1, 2), "level": Level.LOW}
    assert round_trip(value, restore_objects=False) == {
        "msg": {"role": "user", "content": "x", "created": None, "sender": "user"},
        "box": {"value": "red", "label": "b"},
        "pair": {"left": 1, "right": 2},
        "level": 1,
    }
    encoded = encode(value)
    encoded["msg"]["cls"] = "no_such_module_anywhere:Message"
    assert decode(encoded, restore_objects=False)["msg"]["role"] == "user"
    with pytest.raises(SerializationError, match="no_such_module_anywhere") as caught:
        decode(encoded)
    assert caught.value.path == "$.msg"
    assert "restore_objects=False" in str(caught.value)


def test_decode_refuses_classes_of_the_wrong_kind() -> None:
    encoded = encode(Message(role="user", content="x"))
    encoded["cls"] = "subprocess:Popen"  # a tampered log must not get a callable called
    with pytest.raises(SerializationError, match="is not a pydantic model"):
        decode(encoded)
    encoded = encode(Box(1))
    encoded["cls"] = "tests.core.test_codec:Strict"
    with pytest.raises(SerializationError, match="is not a dataclass"):
        decode(encoded)


def test_locally_defined_classes_encode_but_need_restore_objects_false() -> None:
    @dataclasses.dataclass
    class Local:
        x: int

    encoded = encode(Local(1))
    with pytest.raises(SerializationError, match="defined inside a function"):
        decode(encoded)
    assert decode(encoded, restore_objects=False) == {"x": 1}


# --- numpy ----------------------------------------------------------------------------------

NUMPY_SCALARS = [np.bool_(True), np.int8(-5), np.uint8(250), np.int16(-300), np.uint16(65000),
                 np.int32(-(2**31)), np.uint32(2**32 - 1), np.int64(-(2**63)),
                 np.uint64(2**64 - 1), np.float16(0.1), np.float32(0.1), np.float64(-0.0),
                 np.float32("nan"), np.longdouble("1.1"), np.complex64(1 - 2j),
                 np.complex128(complex(math.inf, 0.5)), np.clongdouble(3j),
                 np.datetime64("2024-01-01T12:00", "ns"), np.timedelta64(5, "s"),
                 np.str_("hé"), np.bytes_(b"ab")]


@pytest.mark.parametrize("scalar", NUMPY_SCALARS, ids=lambda s: str(np.asarray(s).dtype))
def test_numpy_scalars_keep_dtype_and_value(scalar: Any) -> None:
    back = round_trip(scalar)
    assert type(back) is type(scalar) and back.dtype == scalar.dtype
    if scalar.dtype.kind in "fc":
        assert np.array_equal(np.asarray(back), np.asarray(scalar), equal_nan=True)
    else:
        assert back == scalar


def test_readable_numpy_scalars() -> None:
    assert stored(np.float32(0.5)) == {TAG: "npscalar", "dtype": "<f4", "v": 0.5}
    assert stored(np.int8(-5)) == {TAG: "npscalar", "dtype": "|i1", "v": -5}


@pytest.mark.parametrize(
    "array",
    [np.arange(12, dtype=">i4").reshape(3, 4), np.array([[0.1, -0.0], [np.nan, np.inf]]),
     np.zeros((0, 3), dtype=np.float32), np.array(5, dtype=np.uint16),
     np.array([True, False]), np.array(["a", "héllo"]), np.arange(6.0).reshape(2, 3).T,
     np.array(["2024-01-01", "NaT"], dtype="datetime64[D]"), np.array([1 + 1j], dtype=">c16")],
    ids=lambda a: f"{a.dtype.str}{a.shape}",
)
def test_numpy_arrays_are_bit_exact(array: Any) -> None:
    back = round_trip(array)
    assert type(back) is np.ndarray and back.dtype.str == array.dtype.str
    assert back.shape == array.shape and back.tobytes() == array.tobytes()
    back[...] = back  # a writeable array, not a view of the decoded buffer


def test_numpy_array_layout() -> None:
    assert stored(np.array([1, 2], dtype="<u2")) == {
        TAG: "ndarray", "dtype": "<u2", "shape": [2], "b64": "AQACAA=="}


def test_numpy_object_arrays_hold_encoded_elements() -> None:
    array = np.empty(3, dtype=object)
    array[:] = [{"a": 1}, (1, 2), None]
    back = round_trip(array)
    assert back.dtype == object and same(list(back), [{"a": 1}, (1, 2), None])


def test_longdouble_padding_does_not_make_bytes_random() -> None:
    values = [np.longdouble(1) / 3 for _ in range(5)]  # fresh objects, fresh padding
    assert len({canonical_bytes(encode(v)) for v in values}) == 1


def test_unsupported_numpy_values_name_the_problem() -> None:
    with pytest.raises(SerializationError, match="structured"):
        encode({"rec": np.zeros(2, dtype=[("a", "i4")])})
    with pytest.raises(SerializationError, match="masked") as caught:
        encode([np.ma.masked_array([1, 2], mask=[False, True])])
    assert caught.value.path == "$[0]"


def test_plain_data_never_imports_numpy() -> None:
    script = (
        "import sys\n"
        "from agentreplay_core._codec import encode, decode, canonical_bytes\n"
        "from datetime import datetime\n"
        "tree = encode({'a': [1.5] * 40, 'b': {1, 2}, 'c': datetime(2024, 1, 1), 'd': b'x'})\n"
        "decode(tree)\n"
        "canonical_bytes(tree)\n"
        "sys.exit(1 if 'numpy' in sys.modules else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr or "numpy was imported"


# --- errors ---------------------------------------------------------------------------------


def test_an_unencodable_value_is_named_by_its_path() -> None:
    request = {"messages": [{"content": "a"}, {"content": "b"}, {"content": object()}]}
    with pytest.raises(SerializationError) as caught:
        encode(request, path="input")
    assert caught.value.path == "input.messages[2].content"
    assert caught.value.type_name == "object"
    assert "register_type" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"weird key": [1, {"x": lambda: 0}]}, '$["weird key"][1].x'),
        ((1, [2, object()]), "$[1][1]"),
        ({"tags": {1, 2, frozenset({object()})}}, "$.tags{*}{*}"),
        ({1: {"deep": object()}}, "$[1].deep"),
        ({(1, object()): "v"}, "$[(1, <object object at"),
        (Box([0, {"k": object()}]), "$.value[1].k"),
        (Item(name="x", payload=[object()]), "$.payload[0]"),
        ({TAG: object()}, "$.__ar__"),
        (Color, "$"),
    ],
)
def test_error_paths(value: Any, path: str) -> None:
    with pytest.raises(SerializationError) as caught:
        encode(value)
    assert caught.value.path.startswith(path)


def test_a_circular_reference_is_reported_as_such() -> None:
    loop: dict[str, Any] = {"items": []}
    loop["items"].append({"parent": loop})
    with pytest.raises(SerializationError, match="circular reference") as caught:
        encode(loop, path="input")
    assert caught.value.path == "input.items[0].parent"
    box = Box(value=None)
    box.value = [box]
    with pytest.raises(SerializationError, match="circular reference"):
        encode(box)


def test_deep_nesting_works_up_to_the_limit_and_fails_clearly_beyond() -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = {"d": [deep]} if isinstance(deep, str) else [deep]
    assert round_trip(deep) == deep
    very_deep: Any = 1
    for _ in range(1000):
        very_deep = [very_deep]
    with pytest.raises(SerializationError, match="nested more than 252 levels"):
        encode(very_deep)


def test_exceptions_from_user_code_become_serialization_errors() -> None:
    class Exploding(dict[str, Any]):
        def __iter__(self) -> Any:
            raise RuntimeError("dictionary changed size during iteration")

        def keys(self) -> Any:
            raise RuntimeError("dictionary changed size during iteration")

    with pytest.raises(SerializationError, match="RuntimeError: dictionary changed") as caught:
        encode({"a": [Exploding(x=1)]}, path="input")
    assert caught.value.path == "input.a[0]"


def test_canonical_bytes_needs_an_encoded_tree() -> None:
    with pytest.raises(SerializationError, match="encode first"):
        canonical_bytes({"when": datetime(2024, 1, 1)})


# --- unencodable marker ---------------------------------------------------------------------


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque \x00 \ud800 " + "x" * 500 + ">"


def test_the_unencodable_marker_survives_storage_and_explains_on_decode() -> None:
    with pytest.raises(SerializationError) as caught:
        encode({"tool": Opaque()}, path="output")
    marker = unencodable_marker(Opaque(), caught.value)
    text = dumps(marker)
    assert b"\\u0000" not in text  # JSONB would reject it
    assert len(marker["repr"]) <= 200
    with pytest.raises(SerializationError) as decoded:
        decode({"result": loads(text)})
    message = str(decoded.value)
    assert "could not be recorded" in message
    assert "Opaque" in message and "output.tool" in message
    assert "register_type" in message and "JSON-serialisable" in message
    assert decoded.value.path == "$.result"
    # a whole step stored as the marker: its error names the recorded place, not `$`
    with pytest.raises(SerializationError) as whole:
        decode(loads(text))
    assert whole.value.path == "output.tool" and "(at $)" not in str(whole.value)
    assert str(whole.value).count("register_type") == 1


# --- registered types -----------------------------------------------------------------------


class Money:
    def __init__(self, amount: Decimal, currency: str) -> None:
        self.amount, self.currency = amount, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.amount, self.currency) == (
            other.amount, other.currency)

    __hash__ = None  # type: ignore[assignment]


class Euro(Money):
    pass


def test_registered_types_round_trip_subclasses_too() -> None:
    register_type(Money, name="test.money", to_json=lambda m: [m.amount, m.currency],
                  from_json=lambda data: Money(*data))
    value = {"price": Money(Decimal("9.90"), "EUR")}
    assert stored(value) == {"price": {TAG: "ext", "name": "test.money",
                                       "v": [{TAG: "decimal", "v": "9.90"}, "EUR"]}}
    assert round_trip(value) == value
    assert round_trip(Euro(Decimal(1), "EUR")) == Money(Decimal(1), "EUR")


def test_unknown_registered_names_and_bad_registrations() -> None:
    tree = {TAG: "ext", "name": "nobody.registered.this", "v": [1]}
    with pytest.raises(SerializationError, match="no decoder registered"):
        decode(tree)
    assert decode(tree, restore_objects=False) == [1]
    with pytest.raises(ValueError, match="encoded by agentreplay itself"):
        register_type(datetime, name="dt", to_json=str, from_json=datetime.fromisoformat)


def test_a_failing_registered_encoder_is_reported_with_its_path() -> None:
    class Fragile:
        pass

    def explode(value: Fragile) -> Any:
        raise RuntimeError("boom")

    register_type(Fragile, name="test.fragile", to_json=explode, from_json=lambda d: Fragile())
    with pytest.raises(SerializationError, match=r"test\.fragile.*boom") as caught:
        encode({"a": [Fragile()]})
    assert caught.value.path == "$.a[0]"


# --- malformed input to decode --------------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "match"),
    [
        ({"x": [{TAG: "no-such-tag"}]}, "unknown tag"),
        ({"x": [{TAG: "bytes", "v": "not base64!"}]}, "cannot decode tagged object 'bytes'"),
        ({"x": [{TAG: "floats"}]}, "cannot decode tagged object 'floats'"),
        ({"x": [{TAG: "ndarray", "dtype": "|O", "shape": [1], "b64": "AAAAAAAAAAA="}]},
         "object"),
    ],
)
def test_malformed_trees_raise_with_a_path(tree: Any, match: str) -> None:
    with pytest.raises(SerializationError, match=match) as caught:
        decode(tree)
    assert caught.value.path == "$.x[0]"
