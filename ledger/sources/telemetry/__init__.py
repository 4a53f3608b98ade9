"""Measurements of nodes and runs: sampling (NVML, DCGM, process CPU), topology, the collector of node figures from Prometheus, the per-run exporter and its HTTP server."""
