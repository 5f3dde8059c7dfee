"""Reports of a run: the live console, and the terminal/HTML/JSON/JUnit reports built from events.

console.py   the live console view (PLAY/TASK banners, PLAY RECAP)
model.py     the report data model (no rendering)
collect.py   ReportCollector: events -> Report
terminal.py  rich topology tree, findings, actions taken
html.py      one self-contained HTML file (svg.py draws its pictures)
json.py      versioned JSON (schema/report-v1.json)
junit.py     JUnit XML for CI and schedulers
render.py    write_report(report, path): the format from the suffix
health.py    one-line health verdicts of probe facts (fleet table, reports)
"""
