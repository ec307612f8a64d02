"""Frontends: models kiln did not write, imported as ``kiln.nn`` modules.

``from_onnx(path)`` reads an ONNX file; ``from_torch(module, example_args)``
captures a PyTorch module with ``torch.export``. Both return an
``ImportedModel`` whose forward runs kiln ops and whose weights are
``Parameter`` s named after the source, so ``kiln.export``, ``Predictor``,
``kiln.compile`` and ``kiln tune --model`` take it like any kiln model.
``supported_onnx_ops()`` and ``supported_aten_ops()`` list what converts.
"""
from .onnx_import import from_onnx, supported_onnx_ops
from .program import ImportedModel, InputSpec
from .torch_import import from_torch, supported_aten_ops

__all__ = ["ImportedModel", "InputSpec", "from_onnx", "from_torch", "supported_aten_ops", "supported_onnx_ops"]
