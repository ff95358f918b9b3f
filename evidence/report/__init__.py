"""The Markdown/HTML report (jinja2 templates under templates/).

`evidence.report.render_report` is named in published release.json files; it stays importable here.
"""

from evidence.report.context import render_report

__all__ = ["render_report"]
