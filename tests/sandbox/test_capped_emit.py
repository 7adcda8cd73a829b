"""Reading back ``car_emit`` output: an encoding cut short (an exec's output at its cap) is an
empty read of the recorded size, never an exception."""

from __future__ import annotations

import base64

from coding_agent_rl.sandbox.capped_read import parse_emitted


def test_a_cut_encoding_reads_as_empty_with_its_size():
    whole = base64.b64encode(b"x" * 100).decode()
    got = parse_emitted(f"CAR-READ 100\n{whole}\n", "CAR-READ", 1000)
    assert (got.data, got.size) == (b"x" * 100, 100)
    cut = parse_emitted(f"CAR-READ 100\n{whole[:-3]}", "CAR-READ", 1000)
    assert (cut.data, cut.size, cut.exists) == (b"", 100, True)
