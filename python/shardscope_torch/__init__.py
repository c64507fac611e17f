"""shardscope_torch: export a PyTorch model's training step to shardscope's graph JSON."""
from .export import DEFAULT_SIZES, export
from .tracer import ExportError

__all__ = ["export", "ExportError", "DEFAULT_SIZES"]
__version__ = "0.1.0"
