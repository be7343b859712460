"""spotline's Python API: submit jobs, follow them, read what they left.

The public names are in ``spotline`` (``spotline.submit``, ``spotline.Job``...);
this package holds them, one module per thing. The CLI is a layer over it.
"""
