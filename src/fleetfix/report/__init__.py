"""Reports of a run: the live console, and the terminal/HTML/JSON/JUnit reports built from events.

console.py   the live console view (PLAY/TASK banners, PLAY RECAP)
progress.py  the live view on a terminal (hosts done, what each does, the slowest)
summary.py   the end of the run: verdicts grouped worst first, next steps
model.py     the report data model (no rendering); each host carries the engine's verdict
collect.py   ReportCollector: events -> Report
terminal.py  rich topology tree, findings, actions taken
html.py      one self-contained HTML file (svg.py draws the spine/leaf picture, html_map.py
             the leaves, racks and hosts, html_hosts.py the hosts table)
json.py      versioned JSON (schema/report-v2.json; compact, steps on request)
junit.py     JUnit XML for CI and schedulers
render.py    write_report(report, path): the format from the suffix
"""
