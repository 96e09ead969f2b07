"""CSV files the studio writes for people to open in a spreadsheet (a run's export, a bench's requests).

A cell that starts with `=`, `+`, `-` or `@` (or a tab or a carriage return, which spreadsheets skip before one) is
a formula to Excel, LibreOffice and Google Sheets: a prompt such as `=HYPERLINK("http://…", "open")` would run
there, in the reader's spreadsheet. Such a text cell is written with a leading `'` (OWASP's advice for CSV
injection), which spreadsheets show as text and hide; numbers (a negative latency) are written as numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """`value` as a CSV cell that no spreadsheet runs."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_csv_rows(handle: TextIO, fieldnames: list[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """A header and `rows` (each with the fields named, no others), every text cell made safe by `csv_cell`."""
    writer = csv.DictWriter(handle, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows({key: csv_cell(value) for key, value in row.items()} for row in rows)
