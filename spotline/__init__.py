"""spotline: train ML models on Spot GPU VMs in your own Google Cloud project.

Everything spotline installs lives under this one name. The repository keeps
its folders at the top (``functions/``, ``shared/``, ``infra/``, ``vm_image/``);
the package maps them here as ``spotline.functions``, ``spotline.shared``,
``spotline.infra`` and ``spotline.vm_image``.
"""

__all__: list[str] = []
