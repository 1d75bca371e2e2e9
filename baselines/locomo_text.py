"""How the baselines render a LoCoMo turn as one line and read a LoCoMo session date.

docs/methods.md, "Turns and dates": `{speaker}: {text}` plus ` [shares {caption}]` for image
turns; dates such as "1:56 pm on 8 May, 2023".
"""
from __future__ import annotations

import datetime as dt

from scgmem.api import Turn

LOCOMO_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


def render_turn_line(turn: Turn) -> str:
    """`{speaker}: {text}` plus ` [shares {caption}]` for image turns."""
    shares = f" [shares {turn.caption}]" if turn.caption else ""
    return f"{turn.speaker}: {turn.text}{shares}"


def parse_locomo_date(date_time: str) -> dt.datetime | None:
    """Parse a LoCoMo session date ("1:56 pm on 8 May, 2023"); None when it does not parse."""
    try:
        return dt.datetime.strptime(date_time.strip(), LOCOMO_DATE_FORMAT)
    except ValueError:
        return None
