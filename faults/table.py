"""The suite's result table: one row per scenario, counted from what really happened."""

from dataclasses import dataclass, field


@dataclass
class Row:
    """One scenario's tally over all its runs."""

    scenario: str
    runs: int = 0
    expected: int = 0
    """Actions the scenario calls for (each should happen exactly once)."""
    taken: int = 0
    """Actions observed on the objects themselves (not in the operator's logs)."""
    double: int = 0
    """Actions observed more than once (a second suspension of one workload...)."""
    lost: int = 0
    """Expected actions that never happened within the deadline."""
    wrong: int = 0
    """Actions nobody asked for (a resume of what the budget did not suspend...)."""
    usage_error: float | None = None
    """The largest |charged - truth| per existing pod, accelerator-seconds (None: n/a)."""
    notes: list[str] = field(default_factory=list)

    def add(self, other: "Row") -> None:
        self.runs += other.runs
        self.expected += other.expected
        self.taken += other.taken
        self.double += other.double
        self.lost += other.lost
        self.wrong += other.wrong
        if other.usage_error is not None:
            self.usage_error = max(self.usage_error or 0.0, other.usage_error)
        self.notes += other.notes

    @property
    def clean(self) -> bool:
        return not (self.double or self.lost or self.wrong) and self.taken == self.expected


HEADERS = (
    "scenario",
    "runs",
    "actions expected",
    "actions taken",
    "double",
    "lost",
    "wrong",
    "usage error (acc-s/pod)",
)


def _cells(row: Row) -> tuple[str, ...]:
    error = "n/a" if row.usage_error is None else f"{row.usage_error:.2f}"
    counts = (row.runs, row.expected, row.taken, row.double, row.lost, row.wrong)
    return (row.scenario, *(str(c) for c in counts), error)


def render(rows: list[Row]) -> str:
    """A Markdown table (readable in a terminal, pasted as is into docs/reliability.md),
    then each scenario's notes."""
    cells = [HEADERS, *(_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]

    def line(values: tuple[str, ...]) -> str:
        padded = (
            v.ljust(w) if i == 0 else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(c) for c in cells[1:]]
    for row in rows:
        out += [f"- {row.scenario}: {note}" for note in row.notes]
    return "\n".join(out) + "\n"
