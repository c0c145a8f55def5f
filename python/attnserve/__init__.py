"""attnserve's PyTorch reference: the same math as the C++ engine, one module per engine part.

Parameter names are the engine's tensor names, so a model built from these modules exports
without renaming.
"""
