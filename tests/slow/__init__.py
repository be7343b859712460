"""Tests that take seconds (a subprocess, a timer, a long simulation) though
they need nothing else."""
