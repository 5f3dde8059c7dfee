"""Run metrics for Prometheus: aggregated from a run's events, written as a textfile for
node_exporter's textfile collector (`fleetfix run --metrics-file`)."""

from fleetfix.metrics.run import RunMetrics
from fleetfix.metrics.textfile import MetricsTextfile

__all__ = ["MetricsTextfile", "RunMetrics"]
