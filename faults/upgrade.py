"""Area 8: upgrade from the previous release (placeholder, filled below)."""

from faults.kit import Context
from faults.table import Row


def run_area(ctx: Context) -> Row:
    raise NotImplementedError
