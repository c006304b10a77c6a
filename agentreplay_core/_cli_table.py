"""Tables whose rows stay on one line at any terminal width (rich would fold cells or drop
whole columns when a table does not fit)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.table import Table
from rich.text import Text

_GAP = 2  # spaces between columns
_MIN_FLEX = 12


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
    with an ellipsis. Cells are plain text (never markup) or styled `Text`."""
    cells = [[c.copy() if isinstance(c, Text) else Text(c) for c in row] for row in rows]
    natural = [max([len(col.header), *(len(row[i].plain) for row in cells)])
               for i, col in enumerate(columns)]
    widths = [n if col.cap is None else min(n, max(col.cap, len(col.header)))
              for n, col in zip(natural, columns, strict=True)]
    flexible = [i for i, col in enumerate(columns) if col.cap is None]
    _narrow(columns, widths, width - _GAP * (len(columns) - 1) - _MIN_FLEX * len(flexible))
    if flexible:
        fixed = sum(w for i, w in enumerate(widths) if i not in flexible)
        room = max(width - fixed - _GAP * (len(columns) - 1), _MIN_FLEX * len(flexible))
        for i in flexible:
            widths[i] = max(min(natural[i], room // len(flexible)), len(columns[i].header))
    table = Table(box=None, header_style="bold", padding=(0, _GAP // 2), pad_edge=False)
    for col, w in zip(columns, widths, strict=True):
        table.add_column(col.header, justify=col.justify, width=w, no_wrap=True,
                         overflow="ellipsis")
    for row in cells:
        for cell, w in zip(row, widths, strict=True):
            cell.truncate(w, overflow="ellipsis")
        table.add_row(*row)
    return table


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
