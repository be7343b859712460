"""The entry points, one module per deployed function (``main.py`` exports
them): decode the CloudEvent (``envelope``), load, decide (``spotline.shared.domain``),
apply (``spotline.functions.ops``)."""
