"""Spot economics: a discrete-event simulator of one training job on Spot VMs.

``bench_econ.py`` runs it; ``model`` holds the stated parameters (what is not
spotline's code), ``traces`` the preemption traces, ``spotline_run`` the runs
through spotline's real handlers, ``baselines`` the modelled comparisons and
``report`` the table.
"""
