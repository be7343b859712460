"""``spotline dashboard``: a read-only web page of jobs and instances, served
locally, updated live through Firestore listeners and Server-Sent Events.

``app`` (routes), ``views`` (what a row shows), ``epochs_svg`` (the chart),
``events`` (the listeners), ``server`` (serving it), ``command`` (the CLI).
"""
