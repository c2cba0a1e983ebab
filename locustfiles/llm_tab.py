"""An "LLM" tab in Locust's own web UI: a live table per scenario and phase, and the per-request CSV.

Locust's page shows extra tabs, tables and CSV links named in its template arguments, and fills a
tab's table from an ``extended_stats`` entry of its periodic /stats/requests answer. Figures come
from our records (never Locust's rounded stats); on a master they arrive with the workers' reports.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench_tasks import formatting
from bench_tasks.live_table import COLUMNS, LiveTable
from bench_tasks.records_file import read_jsonl, write_csv
from locustfiles.sink import RecordsSink

TAB_KEY = "llm"
REPORT_HTML = "report.html"  # written by `llm-bench report` when a run ends (see the sink)
TITLES = {"scenario": "Scenario", "phase": "Phase", "requests": "Requests", "errors": "Errors",
          "ttft_p50_s": "TTFT p50 (s)", "ttft_p95_s": "TTFT p95 (s)", "decode_tps_p50": "Decode tok/s p50",
          "total_tps_now": "Total tok/s now (10 s)", "total_tps": "Total tok/s (phase)"}


class LLMTab:
    """The tab of one run's web UI (``environment.llm.tab``): its table is filled from the sink's rows."""

    def __init__(self, web_ui, sink: RecordsSink) -> None:
        self.table = LiveTable()
        self.sink = sink
        sink.listeners.append(self.table.add)
        web_ui.template_args["extended_tabs"] = [{"title": "LLM", "key": TAB_KEY}]
        web_ui.template_args["extended_tables"] = [
            {"key": TAB_KEY, "structure": [{"key": column, "title": TITLES[column]} for column in COLUMNS]}]
        web_ui.template_args["extended_csv_files"] = [
            {"href": "./llm/requests.csv", "title": "Download LLM per-request CSV (llm-bench requests.csv)"},
            {"href": "./llm/report.html", "title": "LLM report of the last finished run (llm-bench report.html)"}]
        web_ui.app.after_request(self._add_llm_table)
        web_ui.app.add_url_rule("/llm/requests.csv", view_func=self._requests_csv)
        web_ui.app.add_url_rule("/llm/report.html", view_func=self._report_html)

    def reset(self) -> None:
        self.table.reset()

    def _add_llm_table(self, response):
        from flask import request

        if request.path == "/stats/requests" and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": [_display(row) for row in self.table.rows()]}]
            response.set_data(json.dumps(data))
        return response

    def _requests_csv(self):
        from flask import send_file

        writer = self.sink._writer
        rows = read_jsonl(writer.path)[0] if writer is not None else []
        path = Path(tempfile.mkdtemp()) / "requests.csv"
        write_csv(rows, path)
        return send_file(path, mimetype="text/csv", as_attachment=True, download_name="requests.csv")

    def _report_html(self):
        from flask import send_file

        path = self.sink.out_dir / REPORT_HTML
        if not path.exists():
            return "No report yet: it is written into --out when a run ends.", 404
        return send_file(path, mimetype="text/html")


def _display(row: dict) -> dict:
    """Rounded for the eye only; a missing figure shows as formatting.MISSING, never 0."""
    shown = {}
    for key, value in row.items():
        if value is None:
            shown[key] = formatting.MISSING
        elif isinstance(value, float):
            shown[key] = round(value, 3 if key.endswith("_s") else 1)
        else:
            shown[key] = value
    return shown
