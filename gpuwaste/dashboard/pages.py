"""The dashboard's pages, in the sidebar's order: one declaration each. `app.py` builds the
navigation from it, and bench/dashboard.py measures every page of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

VIEWS = Path(__file__).resolve().parent / "views"
JOB = "job"  # the Job page's url path (it opens the job of `?job=`)
SQL = "sql"  # the SQL page's url path


@dataclass(frozen=True)
class Page:
    """A page: its script under `views/`, its title (also its heading), its sidebar icon and its
    url path; `default`: the page `/` opens."""

    script: str
    title: str
    icon: str
    url_path: str
    default: bool = False

    @property
    def path(self) -> Path:
        return VIEWS / self.script


PAGES: tuple[Page, ...] = (
    Page("overview.py", "Overview", ":material/dashboard:", "overview", default=True),
    Page("now.py", "Running now", ":material/hourglass_empty:", "now"),
    Page("cdfs.py", "Utilization CDFs", ":material/show_chart:", "cdfs"),
    Page("waste.py", "Waste tables", ":material/table_chart:", "waste"),
    Page("queue.py", "Queue and failures", ":material/queue:", "queue"),
    Page("policies.py", "Policies", ":material/gavel:", "policies"),
    Page("job.py", "Job", ":material/search:", JOB),
    Page("sql.py", "SQL", ":material/terminal:", SQL),
)
