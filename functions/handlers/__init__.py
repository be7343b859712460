"""The entry points, one module per deployed function (``spotline.functions.main``
exports them): decode the CloudEvent (``envelope``), load, decide
(``spotline.shared.domain``), apply (``spotline.functions.ops``)."""
