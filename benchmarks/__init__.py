"""Benchmarks: scripts run by hand or by make, each printing its table."""
