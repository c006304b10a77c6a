"""Tables whose rows stay on one line at any terminal width (rich would fold cells or drop
whole columns when a table does not fit)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.table import Table
from rich.text import Text

_GAP = 2  # spaces between columns
_MIN_FLEX = 12
#: C0 (ESC, newline, tab...), DEL, C1, and the bidi controls and line separators that reorder
#: or break what follows them: recorded text must not drive the reader's terminal
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with every control character shown as its Python escape (`\\x1b`, `\\n`,
    `\\u202e`), for printing recorded names and messages to a person's terminal."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


#: what `json.dumps(..., ensure_ascii=False)` leaves raw of `_UNSAFE` (it escapes C0 itself)
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                             "\u2066-\u2069]")


def visible_json(text: str) -> str:
    """JSON text with the control characters its strings hold raw written as `\\uXXXX`
    escapes: still the same JSON, and harmless to a terminal."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def visible_text(cell: str | Text) -> Text:
    """A table cell made `visible`; a styled cell keeps its style (not its spans, which the
    escapes would shift)."""
    if isinstance(cell, str):
        return Text(visible(cell))
    shown = visible(cell.plain)
    return cell.copy() if shown == cell.plain else Text(shown, style=cell.style)


@dataclass(frozen=True)
class Column:
    """A column at most `cap` characters wide, or (`cap=None`) sharing the room the capped
    columns leave."""

    header: str
    cap: int | None = 40
    justify: Literal["left", "right"] = "left"
    #: a capped column may narrow down to this many characters when the table does not fit;
    #: None: never (ids, numbers, kinds are no use cut)
    floor: int | None = None


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]],
                 width: int) -> Table:
    """A borderless table of `rows` within `width` characters; cells that do not fit are cut
    with an ellipsis. Cells are plain text (never markup) or styled `Text`; control
    characters in them are shown escaped (`visible`).

    Columns without a floor (ids, statuses, times) are never cut: when even they do not fit,
    the table is wider than `width`, and is to be printed with `crop=False`."""
    cells = [[visible_text(c) for c in row] for row in rows]
    natural = [max([len(col.header), *(len(row[i].plain) for row in cells)])
               for i, col in enumerate(columns)]
    widths = [n if col.cap is None else min(n, max(col.cap, len(col.header)))
              for n, col in zip(natural, columns, strict=True)]
    flexible = [i for i, col in enumerate(columns) if col.cap is None]
    gaps = _GAP * (len(columns) - 1)
    _narrow(columns, widths, width - gaps - _MIN_FLEX * len(flexible))
    fixed = sum(w for i, w in enumerate(widths) if i not in flexible)
    _share(columns, widths, natural, flexible, width - fixed - gaps)
    table = Table(box=None, header_style="bold", padding=(0, _GAP // 2), pad_edge=False)
    if sum(widths) + gaps > width:  # else rich would squeeze every column, ids too
        table.width = sum(widths) + gaps
    for col, w in zip(columns, widths, strict=True):
        table.add_column(col.header, justify=col.justify, width=w, no_wrap=True,
                         overflow="ellipsis")
    for row in cells:
        for cell, w in zip(row, widths, strict=True):
            cell.truncate(w, overflow="ellipsis")
        table.add_row(*row)
    return table


def _share(columns: Sequence[Column], widths: list[int], natural: list[int],
           flexible: list[int], room: int) -> None:
    """Give the flexible columns `room`: a column that needs less than an equal share takes
    what it needs, the others split the rest; none goes below its header."""
    waiting = sorted(flexible, key=lambda i: natural[i])
    while waiting:
        i = waiting.pop(0)
        share = max(room, 0) // (len(waiting) + 1)
        widths[i] = max(min(natural[i], share), len(columns[i].header))
        room -= widths[i]


def _narrow(columns: Sequence[Column], widths: list[int], room: int) -> None:
    """Narrow the columns that have a floor, widest first, until the capped columns fit in
    `room` (rich would otherwise shrink every column, ids and kinds too, to fit the width)."""
    shrinkable = [i for i, col in enumerate(columns)
                  if col.cap is not None and col.floor is not None]
    over = sum(w for i, w in enumerate(widths) if columns[i].cap is not None) - room
    while over > 0:
        open_ = [i for i in shrinkable
                 if widths[i] > max(columns[i].floor or 0, len(columns[i].header))]
        if not open_:
            return
        widest = max(open_, key=lambda i: widths[i])
        widths[widest] -= 1
        over -= 1
