"""`Range: bytes=…` as the storage route reads it (routes/s3_storage.byte_range)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.errors import InvalidInput
from gpufleet.server.routes.s3_storage import byte_range


@given(size=st.integers(1, 10**12), first=st.integers(0, 10**13), last=st.integers(0, 10**13))
def test_a_served_range_is_never_empty_nor_past_the_object(
    size: int, first: int, last: int
) -> None:
    for header in (f"bytes={first}-{last}", f"bytes={first}-", f"bytes=-{last}"):
        try:
            start, end = byte_range(header, size)
        except InvalidInput as refused:
            assert refused.status_code == 416
            continue
        assert 0 <= start < end <= size


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, (0, 10)),
        ("bytes=0-0", 10, (0, 1)),
        ("bytes=2-5", 10, (2, 6)),
        ("bytes=8-100", 10, (8, 10)),
        ("bytes=7-", 10, (7, 10)),
        ("bytes=-3", 10, (7, 10)),
        ("bytes=-30", 10, (0, 10)),
        (" bytes=1-2 ", 10, (1, 3)),
    ],
)
def test_ranges_as_s3_reads_them(header: str | None, size: int, expected: tuple[int, int]) -> None:
    assert byte_range(header, size) == expected


@pytest.mark.parametrize(
    "header",
    ["bytes=10-", "bytes=5-4", "bytes=-", "bytes=0-1,3-4", "bits=0-1", "bytes=-0", "9" * 30],
)
def test_a_range_outside_or_malformed_is_416(header: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        byte_range(header, 10)
    assert refused.value.status_code == 416
