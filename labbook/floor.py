"""The accuracy floor's rule: which accuracy it is set on and how far under it a step still counts as within it."""
from __future__ import annotations

FLOOR_ACCURACY = "mota"
"""The accuracy the floor is set on (notebook 06)."""
FLOOR_SLACK = 0.005
"""How far under the floor a step still counts as within it: half a MOTA point, about one ground-truth box
in 200 (the full clip holds some 17,000). The floor is the knee's own MOTA, so a lever that costs even a
few boxes (INT8: 0.0002 on the full CPU lab) would otherwise put the knee's interval plus that lever under
it by construction."""


def within_floor(value, floor: float | None) -> bool:
    """Whether an accuracy ``value`` is within the floor (at most :data:`FLOOR_SLACK` under it); no
    floor yet: True; no value (NaN, None): False."""
    if floor is None:
        return True
    return value is not None and value == value and float(value) >= float(floor) - FLOOR_SLACK
